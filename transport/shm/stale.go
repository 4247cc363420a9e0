package shm

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// CleanStale removes ring files that a process killed during Connect left
// in dir ("" means DefaultDir()). A file is removed when all of these hold:
// its name is a ring file name, it is a regular file owned by this user,
// the creator pid in its name no longer exists (kill(pid, 0) fails with
// ESRCH), and no process holds the lock a creator keeps on its file until
// setup ends. The last check protects files of live processes in another
// pid namespace sharing the directory, whose pids mean nothing here.
//
// It returns how many files it removed; errors about single files are
// joined, and do not stop the scan.
func CleanStale(dir string) (removed int, err error) {
	if dir == "" {
		dir = DefaultDir()
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, filePrefix) || !e.Type().IsRegular() {
			continue
		}
		pid, ok := creatorPID(name)
		if !ok || processAlive(pid) {
			continue
		}
		ok, err := removeIfUnlocked(filepath.Join(dir, name))
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			removed++
		}
	}
	return removed, errors.Join(errs...)
}

// processAlive reports whether pid exists (possibly owned by another user).
func processAlive(pid int) bool {
	if pid <= 0 {
		return true // never probe process groups
	}
	err := unix.Kill(pid, 0)
	return !errors.Is(err, unix.ESRCH)
}

// removeIfUnlocked unlinks path if it is one of our regular files and
// nobody holds its lock.
func removeIfUnlocked(path string) (bool, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EACCES) {
			return false, nil
		}
		return false, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() {
		return false, nil
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return false, nil
		}
		return false, &os.PathError{Op: "flock", Path: path, Err: err}
	}
	if err := unix.Unlink(path); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, &os.PathError{Op: "remove", Path: path, Err: err}
	}
	return true, nil
}
