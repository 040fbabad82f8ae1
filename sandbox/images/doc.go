// Package images is the catalogue of the container images Vigil builds here,
// without a container engine (package internal/ociimage, go-containerregistry):
//
//   - vigil (localhost/vigil:TAG): the binaries of `make build` that deploy/'s
//     pods run, in /usr/local/bin, and the programs of this machine's Debian
//     packages that vigil-engine-node runs (blkid; mkfs.ext4, which is mke2fs),
//     with the shared libraries they need. It runs as 65532; deploy/ runs the
//     engine's container as root, because it mounts.
//   - pause (localhost/vigil-pause:TAG): a static program that holds a pod's
//     namespaces until SIGTERM (containerd's sandbox_image), as 65535.
//   - writer (localhost/vigil-writer:TAG): `vigil-sandbox writer` alone, for
//     real containers that write to a volume in the tests, as 65532 (a pod
//     gives it fsGroup 65532 to write to its volume).
//   - tools (localhost/vigil-tools:latest): Debian's busybox-static and a link
//     per applet, for shell commands in real containers, as root.
//   - csi-provisioner, csi-attacher, csi-node-driver-registrar, livenessprobe
//     (localhost/NAME:PINNED-VERSION): the upstream CSI sidecars, from the
//     binaries `make testbin` builds from their modules. One that testbin does
//     not build is skipped with a line that says so.
//   - for `make conformance` only, built when named (ConformanceNames, e2e.go):
//     the images e2e.test's storage suites run, under the references its
//     repo list gives them (localhost/e2e-test-images/NAME:VERSION): agnhost
//     from its Go source, busybox from Debian's busybox-static, and nginx and
//     jessie-dnsutils, which are busybox here, labelled as stand-ins.
//
// Build writes one docker-archive tarball per image (`make image`, or
// `vigil-sandbox images build`); `ctr -n k8s.io images import` loads it into
// a containerd. Every image is checked before it is written: each ELF program
// in it is static or finds its interpreter and libraries in the image.
package images
