// Package cliflags lets every Vigil command take its flags anywhere on the
// line, as kubectl does: `settings get NAME -o json` means what
// `settings get -o json NAME` means.
//
// urfave/cli stops reading flags at the first argument. Reorder moves each
// flag, with its value when it takes one, in front of the arguments of the
// command that defines it (or of the nearest parent command that does), before
// cli parses the line. It guarantees that the arguments keep their order, that
// everything after "--" stays an argument, and that a flag no command defines
// is left where cli reports it. It leaves the meaning of every flag to cli.
package cliflags
