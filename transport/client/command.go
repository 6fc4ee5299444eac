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
)

// Command runs a program once per job: the payload JSON on stdin; TETHER_JOB_ID, TETHER_JOB_TYPE,
// TETHER_QUEUE, TETHER_ATTEMPT, TETHER_LEASE_ID and TETHER_LEASE_EXPIRES_AT in its environment;
// stdout is the output (JSON, or plain text sent as a JSON string); each stderr line becomes a
// "log" event. Exit 0 completes the job; any other exit fails it, retryable unless the code is
// one of FatalExitCodes. A cancel from the server, or Timeout, sends SIGTERM to the program's
// process group, then SIGKILL after KillGrace.
type Command struct {
	Args           []string
	Timeout        time.Duration // 0: none
	KillGrace      time.Duration // 0: 10 s
	FatalExitCodes []int
	// Stderr, if set, also receives the program's stderr.
	Stderr io.Writer
}

// Limits of what a program may produce for one job.
const (
	CommandOutputBytesMax = 1 << 20
	logLineBytesMax       = 4 << 10
	logLinesMax           = 10_000
	failTailBytes         = 2 << 10
	logEventTimeout       = 30 * time.Second
)

// Handler returns the Handler that runs the command.
func (c Command) Handler() Handler {
	return func(ctx context.Context, job *Job) (any, error) { return c.run(ctx, job) }
}

func (c Command) run(ctx context.Context, job *Job) (any, error) {
	if len(c.Args) == 0 {
		return nil, &Failure{Code: "no_command", Message: "the worker has no command to run"}
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
	cmd.Env = append(os.Environ(),
		"TETHER_JOB_ID="+job.ID, "TETHER_JOB_TYPE="+job.Type, "TETHER_QUEUE="+job.Queue,
		"TETHER_ATTEMPT="+strconv.Itoa(job.Attempt), "TETHER_LEASE_ID="+job.LeaseID,
		"TETHER_LEASE_EXPIRES_AT="+job.LeaseExpiresAt.UTC().Format(time.RFC3339Nano))
	payload := job.Payload
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	cmd.Stdin = bytes.NewReader(payload)
	var stdout limitedBuffer
	stdout.limit = CommandOutputBytesMax
	cmd.Stdout = &stdout
	// A pipe of our own, not StderrPipe: Wait closes that one as soon as the program exits,
	// which can drop the lines still in it.
	stderr, stderrW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer stderr.Close()
	cmd.Stderr = stderrW
	// The program and its children share a process group, so a cancel reaches a shell's
	// children too: SIGTERM now, SIGKILL after the grace.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		pid := cmd.Process.Pid
		time.AfterFunc(grace, func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
		return syscall.Kill(-pid, syscall.SIGTERM)
	}
	cmd.WaitDelay = grace + time.Second
	err = cmd.Start()
	stderrW.Close() // the program holds its own copy
	if err != nil {
		return nil, &Failure{Code: "start_failed", Message: err.Error(), Retryable: false}
	}
	tail := c.streamStderr(ctx, job, stderr)
	err = cmd.Wait()
	// Every line the program wrote is in the pipe by now; a child that outlived it may hold the
	// pipe open, so its lines get the kill grace and no more.
	var lastLines string
	select {
	case lastLines = <-tail:
	case <-time.After(grace):
		stderr.Close()
		lastLines = <-tail
	}
	switch {
	case runCtx.Err() != nil && ctx.Err() == nil:
		return nil, &Failure{Code: "timeout", Message: fmt.Sprintf("the command ran longer than %s", c.Timeout), Retryable: true}
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case stdout.over:
		return nil, &Failure{Code: "output_too_large", Message: fmt.Sprintf("stdout exceeded %d bytes", CommandOutputBytesMax)}
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
	out := bytes.TrimSpace(stdout.Bytes())
	if json.Valid(out) && len(out) > 0 {
		return json.RawMessage(out), nil
	}
	return string(bytes.TrimRight(stdout.Bytes(), "\n")), nil
}

// streamStderr sends each stderr line as a "log" event, in order, and yields the last lines
// once stderr closes (for a failure's message). Lines a cancelled program writes while it stops
// are sent too: the lease holds until the handler reports.
func (c Command) streamStderr(ctx context.Context, job *Job, r io.Reader) <-chan string {
	tail := make(chan string, 1)
	ctx = context.WithoutCancel(ctx)
	go func() {
		var last []byte
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, logLineBytesMax), logLineBytesMax)
		sent := 0
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
			if sent++; sent <= logLinesMax {
				if sent == logLinesMax {
					line = "[tether: further stderr lines are not sent]"
				}
				ectx, cancel := context.WithTimeout(ctx, logEventTimeout)
				_ = job.Event(ectx, "log", line)
				cancel()
			}
		}
		tail <- strings.TrimSpace(string(last))
	}()
	return tail
}

// limitedBuffer keeps the first limit bytes written and notes that more came.
type limitedBuffer struct {
	bytes.Buffer
	limit int
	over  bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if room := b.limit - b.Len(); n > room {
		b.over = true
		p = p[:max(room, 0)]
	}
	b.Buffer.Write(p)
	return n, nil // the rest is discarded, not refused: the program must not block on a full pipe
}
