// Package ociimage builds container images without a container engine: a Tree
// of files (copied from this machine, written from bytes, directories and
// symbolic links) becomes one reproducible layer, the layer and a config
// (user, entrypoint, environment) become an image with go-containerregistry
// (empty.Image, mutate), and the image is written as a docker-archive tarball,
// which `ctr images import` and `docker load` accept. No registry, no daemon
// and no base image are involved.
//
// A dynamically linked program is added with AddELF, which also adds its
// program interpreter and every shared library it needs, found the way the
// dynamic loader finds them (SearchDirs). Tree.CheckELF and Contents.CheckELF
// prove, before an image is written and after it is read back, that every ELF
// file of the image is static or finds its interpreter and libraries inside
// the image. The catalogue of Vigil's images lives in sandbox/images.
package ociimage
