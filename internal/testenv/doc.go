// Package testenv decides what a test does when the machine lacks something it
// needs: root, /dev/fuse, loop devices, a tool such as mkfs.ext4, the sandbox's
// binaries. On a developer's machine such a test skips, and the package's
// TestMain (Main) prints one line that counts what was skipped and why. In CI
// (CI=true) or with VIGIL_REQUIRE_ALL=1, which .ci/run sets, a missing
// prerequisite fails the test instead, so a check can never pass by not
// running. Skips that are not about the machine (-short, opt-in measurements,
// helper processes) stay plain t.Skip calls; this package is only for
// prerequisites.
//
// It is imported by tests only and holds no state beyond the running test
// binary's counts.
package testenv
