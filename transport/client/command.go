//go:build unix

package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/tetherhq/tether/transport/wire"
)

// Command runs a program once per job, in a process group of its own: the payload JSON on
// stdin; the job's facts in TETHER_JOB_* variables (JobEnv); stdout is the output (JSON, or
// UTF-8 text sent as a JSON string); each stderr line becomes a "log" event. The job's result
// is the program's own exit status: 0 completes it, anything else fails it, retryable unless
// the code is one of FatalExitCodes. When the program exits, whatever it left running in its
// group is ended (SIGTERM, then SIGKILL after KillGrace). A cancel from the server, Timeout, or
// a stopping worker sends SIGTERM to the group, then SIGKILL after KillGrace. A program that
// cannot be started gives the job back untried (*Release) and backs the worker off.
type Command struct {
	Args           []string
	Timeout        time.Duration // 0: none
	KillGrace      time.Duration // 0: 10 s
	FatalExitCodes []int
	// Stderr, if set, also receives the program's stderr.
	Stderr io.Writer
	// Env is KEY=VALUE pairs every job's program gets on top of JobEnv's; they may name a
	// TETHER_* variable, but never a credential (TETHER_TOKEN, TETHER_TOKEN_FILE) nor the job's
	// own TETHER_JOB_* facts.
	Env []string
}

// Limits of what a program may produce for one job.
const (
	logLineBytesMax   = 4 << 10
	logLinesMax       = 10_000
	failTailBytes     = 2 << 10
	logEventTimeout   = 30 * time.Second
	logQueueLen       = 256
	drainIdle         = 50 * time.Millisecond
	commandOutputRead = wire.OutputBytesMax + 1 // what is read of stdout; more is counted, not kept
)

// JobEnv is the environment a job's program gets: the runner's own, without any TETHER_*
// variable (the runner's configuration and credentials, which tether's own flags would read),
// then extra (KEY=VALUE, each replacing a variable of that name), then the job's facts in
// TETHER_JOB_*, a namespace no flag reads, and its trace context in TRACEPARENT.
func JobEnv(base []string, job *Job, extra ...string) []string {
	env := make([]string, 0, len(base)+len(extra)+6)
	for _, kv := range base {
		if !strings.HasPrefix(kv, "TETHER_") && !replaced(kv, extra) {
			env = append(env, kv)
		}
	}
	env = append(env, extra...)
	env = append(env,
		"TETHER_JOB_ID="+job.ID, "TETHER_JOB_TYPE="+job.Type, "TETHER_JOB_QUEUE="+job.Queue,
		"TETHER_JOB_ATTEMPT="+strconv.Itoa(job.Attempt), "TETHER_JOB_LEASE_ID="+job.LeaseID,
		"TETHER_JOB_LEASE_EXPIRES_AT="+job.LeaseExpiresAt.UTC().Format(time.RFC3339Nano))
	// TRACEPARENT is OpenTelemetry's environment carrier: the program's spans nest under the
	// job's trace, never under one the runner itself was started in.
	env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "TRACEPARENT=") })
	if job.Traceparent != "" {
		env = append(env, "TRACEPARENT="+job.Traceparent)
	}
	return env
}

// replaced reports whether extra sets the variable kv sets.
func replaced(kv string, extra []string) bool {
	name, _, _ := strings.Cut(kv, "=")
	for _, e := range extra {
		if n, _, _ := strings.Cut(e, "="); n == name {
			return true
		}
	}
	return false
}

// CheckEnvVar reports whether a job may be given the variable named name: a name a shell takes,
// and not one of tether's credentials or the job's own facts.
func CheckEnvVar(name string) error {
	switch {
	case name == "" || strings.IndexFunc(name, func(r rune) bool {
		return !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	}) >= 0 || name[0] >= '0' && name[0] <= '9':
		return fmt.Errorf("%q is not a variable name: letters, digits and _, not starting with a digit", name)
	case name == "TETHER_TOKEN" || name == "TETHER_TOKEN_FILE":
		return fmt.Errorf("%s is the worker's credential; it is never given to a job", name)
	case strings.HasPrefix(name, "TETHER_JOB_"):
		return fmt.Errorf("%s is one of the job's own facts, set by the worker", name)
	}
	return nil
}

// Check reports whether the command can be started at all, so that a worker with a typo in
// its command refuses to start rather than give every job back.
func (c Command) Check() error {
	if len(c.Args) == 0 {
		return errors.New("no command to run")
	}
	for _, kv := range c.Env {
		name, _, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("environment entry %q is not KEY=VALUE", kv)
		}
		if err := CheckEnvVar(name); err != nil {
			return err
		}
	}
	path, err := exec.LookPath(c.Args[0])
	if err != nil {
		return fmt.Errorf("the command cannot be run: %w", err)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("the command cannot be run: %s is a directory", path)
	}
	return nil
}

// Handler returns the Handler that runs the command.
func (c Command) Handler() Handler {
	return func(ctx context.Context, job *Job) (any, error) { return c.run(ctx, job) }
}

func (c Command) run(ctx context.Context, job *Job) (any, error) {
	if len(c.Args) == 0 {
		return nil, &Release{Reason: ReleaseStartFailed, Message: "the worker has no command to run"}
	}
	grace := c.KillGrace
	if grace <= 0 {
		grace = 10 * time.Second
	}
	runCtx, cancel := ctx, context.CancelFunc(func() {})
	if c.Timeout > 0 {
		runCtx, cancel = context.WithTimeout(ctx, c.Timeout)
	}
	defer cancel()
	cmd := exec.CommandContext(runCtx, c.Args[0], c.Args[1:]...)
	cmd.Env = JobEnv(os.Environ(), job, c.Env...)
	payload := job.Payload
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	// Pipes of our own, not os/exec's: its Wait waits until its copying of every pipe is
	// done, which a child the program left in the background may hold up forever; and
	// StderrPipe is closed as soon as the program exits, which can drop lines still in it.
	var pipes [3][2]*os.File // stdin, stdout, stderr: read and write ends
	for i := range pipes {
		r, w, err := os.Pipe()
		if err != nil {
			for _, p := range pipes[:i] {
				p[0].Close()
				p[1].Close()
			}
			return nil, err
		}
		pipes[i] = [2]*os.File{r, w}
	}
	stdinW, stdout, stderr := pipes[0][1], pipes[1][0], pipes[2][0]
	defer stdinW.Close()
	defer stdout.Close()
	defer stderr.Close()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pipes[0][0], pipes[1][1], pipes[2][1]
	// The program and its children share a process group, so a cancel, and the end of the job,
	// reach a shell's children too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return endGroup(cmd.Process.Pid, grace) }
	cmd.WaitDelay = grace + time.Second
	err := cmd.Start()
	for _, f := range []*os.File{pipes[0][0], pipes[1][1], pipes[2][1]} {
		f.Close() // the program holds its own copies
	}
	if err != nil {
		return nil, &Release{Reason: ReleaseStartFailed, Message: err.Error()}
	}
	job.startedProcess(cmd.Process.Pid, grace)
	go func() {
		_, _ = stdinW.Write(payload) // fails at once if the program has gone, or its stdin is closed below
		_ = stdinW.Close()
	}()
	exited := make(chan struct{})
	out := make(chan capped, 1)
	go func() { out <- readCapped(&drainReader{f: stdout, exited: exited}, commandOutputRead) }()
	tail := c.streamStderr(ctx, job, &drainReader{f: stderr, exited: exited})
	err = cmd.Wait()
	// The program is gone: read what it wrote, without waiting for what it left behind, and
	// end that.
	close(exited)
	_ = stdout.SetReadDeadline(time.Now().Add(drainIdle))
	_ = stderr.SetReadDeadline(time.Now().Add(drainIdle))
	_ = endGroup(cmd.Process.Pid, grace)
	stdoutBytes, lastLines := <-out, <-tail
	switch {
	case runCtx.Err() != nil && ctx.Err() == nil:
		return nil, &Failure{Code: "timeout", Message: fmt.Sprintf("the command ran longer than %s", c.Timeout), Retryable: true}
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil:
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			return nil, &Failure{Code: "command_failed", Message: err.Error(), Retryable: true}
		}
		code := exit.ExitCode()
		msg := fmt.Sprintf("exit status %d", code)
		if code < 0 {
			msg = exit.String()
		}
		if lastLines != "" {
			msg += ": " + lastLines
		}
		return nil, &Failure{Code: "exit_" + strconv.Itoa(code), Message: msg, Retryable: !slices.Contains(c.FatalExitCodes, code)}
	}
	return outputOfCommand(stdoutBytes)
}

// outputOfCommand turns what a program printed into the job's output: JSON as it is, else text
// as a JSON string without its trailing line breaks. Output that would not fit the output
// limit once encoded, or text that is not UTF-8, fails the job for good, saying why, rather
// than be cut or altered.
func outputOfCommand(o capped) (any, error) {
	tooLarge := func(n int) error {
		return &Failure{Code: "output_too_large", Message: fmt.Sprintf("the output is %d bytes of JSON; the limit is %d", n, wire.OutputBytesMax)}
	}
	if o.total > len(o.data) {
		return nil, tooLarge(o.total)
	}
	if trimmed := bytes.TrimSpace(o.data); len(trimmed) > 0 && json.Valid(trimmed) && utf8.Valid(trimmed) {
		if len(trimmed) > wire.OutputBytesMax {
			return nil, tooLarge(len(trimmed))
		}
		return json.RawMessage(trimmed), nil
	}
	text := bytes.TrimRight(o.data, "\r\n")
	if !utf8.Valid(text) {
		at := len(text)
		for i := 0; i < len(text); {
			r, size := utf8.DecodeRune(text[i:])
			if r == utf8.RuneError && size <= 1 {
				at = i
				break
			}
			i += size
		}
		return nil, &Failure{Code: "output_not_utf8", Message: fmt.Sprintf(
			"stdout is neither JSON nor UTF-8 text (a bad byte at offset %d); print JSON, or UTF-8 text, or encode binary data (base64)", at)}
	}
	encoded, err := json.Marshal(string(text))
	if err != nil {
		return nil, &Failure{Code: "bad_output", Message: err.Error()}
	}
	if len(encoded) > wire.OutputBytesMax {
		return nil, tooLarge(len(encoded))
	}
	return json.RawMessage(encoded), nil
}

// endGroup ends a job's process group: SIGTERM now, SIGKILL after grace to whatever is left.
func endGroup(pgid int, grace time.Duration) error {
	err := syscall.Kill(-pgid, syscall.SIGTERM)
	if err == nil {
		time.AfterFunc(grace, func() {
			if syscall.Kill(-pgid, 0) == nil {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
		})
	}
	return err
}

// capped is what was read of a stream: its first bytes, and how many it had in all.
type capped struct {
	data  []byte
	total int
}

// readCapped reads r to its end, keeping the first limit bytes: the rest is read and counted,
// never kept, and never refused, so the program never blocks on a full pipe.
func readCapped(r io.Reader, limit int) capped {
	var c capped
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if keep := min(n, limit-len(c.data)); keep > 0 {
			c.data = append(c.data, buf[:keep]...)
		}
		c.total += n
		if err != nil {
			return c
		}
	}
}

// drainReader reads a pipe of a program until its end or, once the program has exited
// (exited closed), until it has been empty for drainIdle: what the program wrote is read, and
// a child that outlived it holding the pipe open does not hold the job. A reader ending that
// way reports io.EOF.
//
// A deadline ends only a wait on an empty pipe, never bytes already in it: Go checks a
// deadline before it tries the read, so a reader that was not scheduled for drainIdle after
// the deadline was set (a loaded machine) would otherwise find it passed and drop what the
// program printed, and the job would succeed with no output. So a read the deadline ended
// looks at what the pipe holds (FIONREAD) and, if anything, reads it with no deadline.
type drainReader struct {
	f      *os.File
	exited <-chan struct{}
}

func (d *drainReader) Read(p []byte) (int, error) {
	select {
	case <-d.exited:
		_ = d.f.SetReadDeadline(time.Now().Add(drainIdle))
	default:
	}
	for {
		n, err := d.f.Read(p)
		if !errors.Is(err, os.ErrDeadlineExceeded) || n > 0 {
			return n, err
		}
		if buffered(d.f) == 0 {
			return 0, io.EOF
		}
		_ = d.f.SetReadDeadline(time.Time{}) // the bytes are there: the read will not wait
	}
}

// buffered is how many bytes a pipe holds unread, 0 if that cannot be told.
func buffered(f *os.File) int {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	_ = rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), fionread) })
	return n
}

// streamStderr sends each stderr line as a "log" event, in order, and yields the last lines
// once stderr ends (for a failure's message). Reading and sending are apart, so that lines
// the program wrote before it exited are sent even if the server is slow to take them. Lines
// a cancelled program writes while it stops are sent too: the lease holds until the handler
// reports.
func (c Command) streamStderr(ctx context.Context, job *Job, r io.Reader) <-chan string {
	tail := make(chan string, 1)
	lines := make(chan string, logQueueLen)
	ctx = context.WithoutCancel(ctx)
	go func() {
		defer close(lines)
		var last []byte
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, logLineBytesMax), logLineBytesMax)
		for {
			if !sc.Scan() {
				if errors.Is(sc.Err(), bufio.ErrTooLong) { // a line over the limit: skip it, go on
					sc = bufio.NewScanner(r)
					sc.Buffer(make([]byte, logLineBytesMax), logLineBytesMax)
					continue
				}
				break
			}
			line := sc.Text()
			if c.Stderr != nil {
				fmt.Fprintln(c.Stderr, line)
			}
			last = append(last, line...)
			last = append(last, '\n')
			if len(last) > failTailBytes {
				last = last[len(last)-failTailBytes:]
			}
			lines <- line
		}
		tail <- strings.TrimSpace(string(last))
	}()
	done := make(chan string, 1)
	go func() {
		sent := 0
		for line := range lines {
			if sent++; sent > logLinesMax {
				continue
			}
			if sent == logLinesMax {
				line = "[tether: further stderr lines are not sent]"
			}
			ectx, cancel := context.WithTimeout(ctx, logEventTimeout)
			_ = job.Event(ectx, "log", line)
			cancel()
		}
		done <- <-tail
	}()
	return done
}
