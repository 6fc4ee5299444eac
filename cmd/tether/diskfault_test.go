package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

// Disk faults as operators meet them, with real processes and real file systems: a data dir
// made read-only (its permissions while the server runs; a read-only mount across a restart)
// and a full disk (a small tmpfs), on a single server and on a standby. Each ends in one JSON
// line naming the path and the cause, and exit status 74, with no Pebble panic and no flood.

// mountTmpfs mounts a tmpfs of size bytes on a new directory, for the test's life. It needs
// root; the test is skipped, saying so, where it cannot mount.
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	dir, err := tryMountTmpfs(t, size)
	if err != nil {
		t.Skipf("%v: the disk-fault tests need root (CAP_SYS_ADMIN) to mount a tmpfs as a data dir", err)
	}
	return dir
}

// tryMountTmpfs mounts a tmpfs of size bytes on a new directory, unmounted when the test ends,
// or says why it cannot.
func tryMountTmpfs(t *testing.T, size int) (string, error) {
	t.Helper()
	if os.Getuid() != 0 {
		return "", fmt.Errorf("not root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		return "", fmt.Errorf("mount a tmpfs: %w", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir, nil
}

// fillBut fills the file system of dir but for about free bytes.
func fillBut(t *testing.T, dir string, free int64) {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	size := int64(st.Bavail)*st.Bsize - free
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for ; size > 0; size -= int64(len(chunk)) {
		if _, err := f.Write(chunk[:min(int64(len(chunk)), size)]); err != nil {
			t.Fatal(err)
		}
	}
}

// remountReadOnly makes a tmpfs read-only; nothing may hold a file of it open for writing.
func remountReadOnly(t *testing.T, dir string) {
	t.Helper()
	if err := syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount %s read-only: %v", dir, err)
	}
}

// logLine is one line of a server's JSON log.
type logLine struct {
	Level, Msg, Code, Path, Op, Errno, Error string
}

// jsonLog reads a log written under --log-format json, failing the test at a line that is not
// JSON.
func jsonLog(t *testing.T, out string) []logLine {
	t.Helper()
	var lines []logLine
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l logLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("a line that is not JSON under --log-format json: %q", sc.Text())
		}
		lines = append(lines, l)
	}
	return lines
}

// checkStorageStop checks how a server stopped on a disk fault: exit status 74, one error line
// of its JSON log, with code, under dir, errno, and nothing else gone wrong: no panic, no
// other error line, no flood.
func checkStorageStop(t *testing.T, p *process, code, dir, errno string) logLine {
	t.Helper()
	status := p.wait(60 * time.Second)
	out := p.output()
	if status != exitStorage {
		t.Fatalf("exit %d, want %d:\n%s", status, exitStorage, tail(out))
	}
	if strings.Contains(out, "panic") || strings.Contains(out, "goroutine ") {
		t.Fatalf("the server panicked:\n%s", tail(out))
	}
	lines := jsonLog(t, out)
	var errs []logLine
	for _, l := range lines {
		if l.Level == "error" {
			errs = append(errs, l)
		}
	}
	if len(errs) != 1 {
		t.Fatalf("%d error lines, want the one that names the fault:\n%s", len(errs), tail(out))
	}
	e := errs[0]
	if e.Code != code || e.Errno != errno || !strings.HasPrefix(e.Path, dir) {
		t.Fatalf("the error line %+v, want code %s, errno %s, a path under %s", e, code, errno, dir)
	}
	if len(lines) > 50 {
		t.Fatalf("%d log lines: the log is not bounded", len(lines))
	}
	return e
}

// waitReady waits until the server at addr answers /readyz with 200.
func waitReady(t *testing.T, p *process, addr string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, _, _ := readyz("http://" + addr); st == 200 {
			return
		}
		if time.Now().After(deadline) || p.wait(0) >= 0 {
			t.Fatalf("the server at %s was not ready:\n%s", addr, tail(p.output()))
		}
	}
}

// fill submits jobs of 512 KiB until a submit fails: the server went away.
func fill(t *testing.T, c *client.Client) {
	t.Helper()
	payload := json.RawMessage(fmt.Sprintf(`{"pad":%q}`, strings.Repeat("x", 512<<10)))
	for i := range 400 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.Submit(ctx, wire.SubmitRequest{Queue: "q", Type: "t", Payload: payload})
		cancel()
		if err != nil {
			t.Logf("submit %d failed: %v", i, err)
			return
		}
	}
	t.Fatal("200 MiB of submits went through; the disk never filled")
}

// A data dir whose permissions an operator took away while the server runs: the next WAL Pebble
// makes is refused. The server stops with one line naming the file and "permission denied",
// exit 74, where Pebble used to panic ("sync: unlock of unlocked mutex").
func TestDataDirMadeReadOnlyWhileRunning(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	parent, err := os.MkdirTemp("", "tether-chmod")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	dir := filepath.Join(parent, "data")
	addr := freeAddr(t)
	p := &process{cmd: exec.Command(bin, "server", "--data", dir, "--addr", addr, "--log-format", "json"), done: make(chan struct{})}
	if os.Getuid() == 0 { // root writes anywhere: run as nobody, whom permissions hold
		for _, d := range []string{filepath.Dir(bin), parent} {
			if err := os.Chmod(d, 0o777); err != nil {
				t.Fatal(err)
			}
		}
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}, Setpgid: true}
	}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); <-p.done })
	waitReady(t, p, addr)
	c := client.New("http://"+addr, "", nil)
	if out, err := exec.Command("chmod", "-R", "a-w", dir).CombinedOutput(); err != nil {
		t.Fatalf("chmod: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("chmod", "-R", "u+w", parent).Run() })
	fill(t, c)
	e := checkStorageStop(t, p, "STORAGE_READ_ONLY", dir, "EACCES")
	t.Logf("stopped: %s %s %s: %s", e.Msg, e.Op, e.Path, e.Error)
}

// A data dir on a file system mounted read-only across a restart: the server says so, naming
// the lock file and EROFS, exit 74; not "log is in use by another process", as it did.
func TestDataDirOnAReadOnlyFileSystem(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	mnt := mountTmpfs(t, 64<<20)
	dir := filepath.Join(mnt, "data")
	s := startServer(t, dir)
	stop(t, s)
	remountReadOnly(t, mnt)
	p := startTether(t, nil, "server", "--data", dir, "--addr", freeAddr(t), "--log-format", "json")
	e := checkStorageStop(t, p, "STORAGE_READ_ONLY", dir, "EROFS")
	if strings.Contains(p.output(), "in use") {
		t.Fatalf("a read-only file system said to be in use:\n%s", p.output())
	}
	t.Logf("stopped: %s %s %s: %s", e.Msg, e.Op, e.Path, e.Error)
}

// A single server whose disk fills stops with one line naming the file and ENOSPC, exit 74;
// started again on the full disk, it stops so at once, and its log stays bounded.
func TestDataDirOnAFullDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	mnt := mountTmpfs(t, 24<<20)
	dir := filepath.Join(mnt, "data")
	addr := freeAddr(t)
	p := startTether(t, nil, "server", "--data", dir, "--addr", addr, "--log-format", "json")
	waitReady(t, p, addr)
	fill(t, client.New("http://"+addr, "", nil))
	e := checkStorageStop(t, p, "STORAGE_FULL", dir, "ENOSPC")
	t.Logf("stopped: %s %s %s: %s", e.Msg, e.Op, e.Path, e.Error)
	again := startTether(t, nil, "server", "--data", dir, "--addr", addr, "--log-format", "json")
	e = checkStorageStop(t, again, "STORAGE_FULL", dir, "ENOSPC")
	t.Logf("started again on the full disk: %s %s %s", e.Msg, e.Op, e.Path)
}

// A standby whose disk fills as it copies the stream stops (one line, exit 74), the leader
// going on; started again on the full disk, it stops at once with one line, where it used to
// stay NOT_READY for ever, logging about 93 STORAGE_ERROR lines a second with stack traces.
func TestStandbyOnAFullDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("real NATS and tether processes")
	}
	mnt := mountTmpfs(t, 24<<20)
	nc := startNATS(t, 1)
	logURL := "nats://" + nc.hosts() + "/TETHER"
	server := func(dir, addr string) *process {
		return startTether(t, nil, "server", "--data", dir, "--addr", addr, "--log", logURL, "--nats-replicas", "1",
			"--leader-ttl", chaosTTL.String(), "--log-format", "json")
	}
	leaderAddr, standbyAddr := freeAddr(t), freeAddr(t)
	leader := server(t.TempDir(), leaderAddr)
	waitReady(t, leader, leaderAddr)
	dir := filepath.Join(mnt, "data")
	standby := server(dir, standbyAddr)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, code, _ := readyz("http://" + standbyAddr); code == wire.CodeStandby {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no standby:\n%s", tail(standby.output()))
		}
	}
	c := client.New("http://"+leaderAddr, "", nil)
	payload := json.RawMessage(fmt.Sprintf(`{"pad":%q}`, strings.Repeat("x", 512<<10)))
	for i := 0; standby.wait(0) < 0; i++ {
		if i == 400 {
			t.Fatal("200 MiB through the leader, and the standby's disk never filled")
		}
		if _, err := c.Submit(context.Background(), wire.SubmitRequest{Queue: "q", Type: "t", Payload: payload}); err != nil {
			t.Fatalf("the leader refused a submit while the standby's disk filled: %v", err)
		}
	}
	e := checkStorageStop(t, standby, "STORAGE_FULL", dir, "ENOSPC")
	t.Logf("the standby stopped: %s %s %s", e.Msg, e.Op, e.Path)
	again := server(dir, standbyAddr)
	e = checkStorageStop(t, again, "STORAGE_FULL", dir, "ENOSPC")
	t.Logf("started again on the full disk: %s %s %s", e.Msg, e.Op, e.Path)
	if st, _, _ := readyz("http://" + leaderAddr); st != 200 {
		t.Fatalf("the leader is not ready after the standby's disk filled (%d)", st)
	}
}
