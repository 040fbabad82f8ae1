// Package loopdev attaches and detaches Linux loop devices with the kernel's ioctls
// (LOOP_CTL_GET_FREE, LOOP_CONFIGURE, LOOP_CLR_FD), without shelling out to
// losetup. Devices are attached with autoclear: the kernel detaches a device by
// itself once the last opener (the Device's own descriptor, a mounted filesystem)
// lets go, so a process killed mid-way leaks no device that nothing uses. It also
// finds devices by backing file, for recovery after a crash.
package loopdev
