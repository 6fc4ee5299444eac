package eventlog

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// StorageFault is a write the file system refused for good: the directory is read-only
// (EROFS, or EACCES and EPERM: its permissions), full (ENOSPC, EDQUOT), or failing (EIO).
// Nothing the store does without that write is safe, and it does not heal by trying again.
type StorageFault struct {
	// Op is what was refused (write, sync, create, lock, ...) and Path the file or directory.
	Op, Path string
	// Errno is the system's reason.
	Errno syscall.Errno
}

func (f *StorageFault) Error() string {
	return fmt.Sprintf("%s: %s %s: %s", f.Reason(), f.Op, f.Path, f.Errno.Error())
}

// Unwrap makes errors.Is(f, syscall.EROFS) and the like hold.
func (f *StorageFault) Unwrap() error { return f.Errno }

// Code is the fault's stable code: STORAGE_READ_ONLY, STORAGE_FULL or STORAGE_IO_ERROR.
func (f *StorageFault) Code() string {
	switch f.Errno {
	case syscall.ENOSPC, syscall.EDQUOT:
		return "STORAGE_FULL"
	case syscall.EIO:
		return "STORAGE_IO_ERROR"
	}
	return "STORAGE_READ_ONLY"
}

// ErrnoName is the reason as the system names it (EROFS, ENOSPC, ...).
func (f *StorageFault) ErrnoName() string {
	for name, e := range faultErrnos {
		if e == f.Errno {
			return name
		}
	}
	return f.Errno.Error()
}

// Reason says what is wrong with the storage, for an operator.
func (f *StorageFault) Reason() string {
	switch f.Errno {
	case syscall.EROFS:
		return "the file system is read-only"
	case syscall.EACCES, syscall.EPERM:
		return "the directory may not be written (its permissions)"
	case syscall.ENOSPC:
		return "the disk is full"
	case syscall.EDQUOT:
		return "the disk quota is used up"
	}
	return "the disk failed"
}

// faultErrnos are the reasons that make a refused write a StorageFault, by name.
var faultErrnos = map[string]syscall.Errno{
	"EROFS": syscall.EROFS, "EACCES": syscall.EACCES, "EPERM": syscall.EPERM,
	"ENOSPC": syscall.ENOSPC, "EDQUOT": syscall.EDQUOT, "EIO": syscall.EIO,
}

// AsStorageFault finds a storage fault in err: a *StorageFault, or a file system error (a
// path, link or system call error) whose errno is one of a fault's.
func AsStorageFault(err error) (*StorageFault, bool) {
	var f *StorageFault
	if errors.As(err, &f) {
		return f, true
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return nil, false
	}
	fault := false
	for _, e := range faultErrnos {
		fault = fault || e == errno
	}
	if !fault {
		return nil, false
	}
	f = &StorageFault{Errno: errno}
	var pe *fs.PathError
	var le *os.LinkError
	var se *os.SyscallError
	switch {
	case errors.As(err, &pe):
		f.Op, f.Path = pe.Op, pe.Path
	case errors.As(err, &le):
		f.Op, f.Path = le.Op, le.New
	case errors.As(err, &se):
		f.Op = se.Syscall
	}
	return f, true
}

// faultFS reports every write its FS refuses for good (a StorageFault) to fault before the
// error goes back to Pebble (not a preallocation, which Pebble does without if it must): Pebble goes on, or panics past recovery (a WAL it cannot create or
// close), or retries a flush for ever, logging each try; the server, told first, stops.
type faultFS struct {
	vfs.FS
	fault func(*StorageFault)
}

// check reports err to fault if it is a storage fault on path, and returns it.
func (fs *faultFS) check(op, path string, err error) error {
	if err == nil {
		return nil
	}
	if f, ok := AsStorageFault(err); ok {
		if f.Path == "" {
			f.Path = path
		}
		if f.Op == "" {
			f.Op = op
		}
		fs.fault(f)
	}
	return err
}

func (fs *faultFS) file(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return faultFile{File: f, fs: fs, name: name}, nil
}

func (fs *faultFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, cat)
	return fs.file(name, f, fs.check("create", name, err))
}

func (fs *faultFS) OpenReadWrite(name string, cat vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, cat, opts...)
	return fs.file(name, f, fs.check("open", name, err))
}

func (fs *faultFS) ReuseForWrite(oldname, newname string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, cat)
	return fs.file(newname, f, fs.check("rename", newname, err))
}

func (fs *faultFS) Link(oldname, newname string) error {
	return fs.check("link", newname, fs.FS.Link(oldname, newname))
}

func (fs *faultFS) Rename(oldname, newname string) error {
	return fs.check("rename", newname, fs.FS.Rename(oldname, newname))
}

func (fs *faultFS) MkdirAll(dir string, perm os.FileMode) error {
	return fs.check("mkdir", dir, fs.FS.MkdirAll(dir, perm))
}

func (fs *faultFS) Lock(name string) (io.Closer, error) {
	c, err := fs.FS.Lock(name)
	return c, fs.check("lock", name, err)
}

// Unwrap lets Pebble see through the wrapper where it looks for the underlying FS.
func (fs *faultFS) Unwrap() vfs.FS { return fs.FS }

type faultFile struct {
	vfs.File
	fs   *faultFS
	name string
}

func (f faultFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	return n, f.fs.check("write", f.name, err)
}

func (f faultFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	return n, f.fs.check("write", f.name, err)
}

func (f faultFile) Sync() error { return f.fs.check("sync", f.name, f.File.Sync()) }

func (f faultFile) SyncData() error { return f.fs.check("sync", f.name, f.File.SyncData()) }

func (f faultFile) SyncTo(length int64) (bool, error) {
	full, err := f.File.SyncTo(length)
	return full, f.fs.check("sync", f.name, err)
}

func (f faultFile) Close() error { return f.fs.check("close", f.name, f.File.Close()) }
