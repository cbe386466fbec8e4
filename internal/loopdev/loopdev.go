// Package loopdev attaches files to loop devices: the one place that
// knows the loop-control dance, shared by the native backend's sandbox
// disks and local volumes (both are ext4 images mounted through a loop
// device, so the kernel enforces their size).
package loopdev

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Attach attaches image to a free loop device configured with autoclear
// and returns the open device: once a filesystem is mounted from it and
// the caller closes the device, unmounting detaches it, so there is no
// loop device to track or leak.
func Attach(image string) (*os.File, error) {
	img, err := os.OpenFile(image, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open disk image: %w", err)
	}
	defer img.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open loop control: %w", err)
	}
	defer ctl.Close()
	// GET_FREE then CONFIGURE races with other attachers; EBUSY means someone
	// took the device first, so ask again. It also means a device a
	// teardown has just released that the old filesystem still claims for
	// a moment: GET_FREE hands the same device out again
	// until the claim is gone, so after a few quick retries wait a little
	// between them, for up to a second.
	deadline := time.Now().Add(time.Second)
	for attempt := 0; attempt < 256; attempt++ {
		if attempt >= 4 {
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("find free loop device: %w", err)
		}
		name := "/dev/loop" + strconv.Itoa(n)
		dev, err := openDevice(name, n)
		if err != nil {
			return nil, err
		}
		cfg := unix.LoopConfig{Fd: uint32(img.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if err == nil {
			return dev, nil
		}
		dev.Close()
		if !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("configure %s: %w", name, err)
		}
	}
	return nil, errors.New("no free loop device: every one offered was busy for a second")
}

// openDevice opens /dev/loopN, creating the node when /dev is not a
// devtmpfs that does it for us.
func openDevice(name string, n int) (*os.File, error) {
	dev, err := os.OpenFile(name, os.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		if err := unix.Mknod(name, unix.S_IFBLK|0o660, int(unix.Mkdev(7, uint32(n)))); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("create %s: %w", name, err)
		}
		dev, err = os.OpenFile(name, os.O_RDWR|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	return dev, nil
}
