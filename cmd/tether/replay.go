package main

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/eventlog/jetstream"
	"github.com/tetherhq/tether/projections/audit"
	"github.com/tetherhq/tether/projections/audit/report"
	"github.com/tetherhq/tether/transport/cli"
)

func runReplay(args []string) error {
	return cli.Subcommands("replay", []cli.Command{
		{Name: "verify", Summary: "verify a data dir's chain, index and projections (or an export: --export FILE)", Run: replayVerify},
		{Name: "history", Summary: "the whole story of a job, a flow or a schedule", Run: replayHistory},
		{Name: "state", Summary: "the projections as they stood at a seq or time (--at)", Run: replayState},
		{Name: "export", Summary: "records as JSON Lines (--from, --to)", Run: replayExport},
		{Name: "receipt", Summary: "confirm a receipt {seq, hash} is in the log", Run: replayReceipt},
	}, args)
}

// replayFlags are the flags every replay command takes.
type replayFlags struct {
	data    string
	archive string
	json    bool
	nats    natsConn
}

func (r *replayFlags) register(fs *flag.FlagSet) {
	r.registerLog(fs)
	fs.BoolVar(&r.json, "json", false, "print JSON instead of text")
}

// registerLog registers the flags that say where the log is.
func (r *replayFlags) registerLog(fs *flag.FlagSet) {
	fs.StringVar(&r.data, "data", "", "the data directory (read only; the server must be stopped); with --log, where the copy of the stream is kept (empty: a temporary one)")
	fs.StringVar(&r.archive, "archive", "", "the directory of the log's archive segments (the server's --archive-dir); empty: DATA/archive")
	r.nats.register(fs, "read a replicated log instead: nats://host:4222[,host...]/STREAM, copied as it stands (the servers may keep running)")
}

// openStream copies the replicated log into the data dir (a temporary one unless given) and
// opens the copy; the servers on the stream go on meanwhile.
func (r *replayFlags) openStream() (*eventlog.Log, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := r.nats.config("tether replay")
	cfg.Existing = true
	stream, err := jetstream.Connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	cli.AtExit(stream.Close)
	dir := r.data
	if dir == "" {
		if dir, err = os.MkdirTemp("", "tether-replay-"); err != nil {
			return nil, err
		}
		cli.AtExit(func() { _ = os.RemoveAll(dir) })
	}
	return eventlog.Open(dir, eventlog.Options{Upstream: stream, ArchiveDir: r.archive})
}

// open opens the data dir read-only, saying plainly when a server holds it. fs is the command's
// flags, for a mistake in them: a usage error.
func (r *replayFlags) open(fs *flag.FlagSet) (*eventlog.Log, error) {
	if err := r.nats.check(fs); err != nil {
		return nil, err
	}
	if r.nats.log != "" {
		return r.openStream()
	}
	if r.data == "" {
		return nil, cli.BadFlagf(fs, "--data is required (or --log nats://...)")
	}
	l, err := audit.OpenWithArchive(r.data, r.archive)
	switch {
	case errors.Is(err, eventlog.ErrInUse):
		return nil, fmt.Errorf("%s is in use by a running server; stop the server and run replay again", r.data)
	case audit.BadSeq(err) > 0: // the head record does not chain: Open checks it
		return nil, report.Failed(err)
	}
	return l, err
}

func (r *replayFlags) print(v any, human func() string) error {
	return cli.Print(r.json, v, human)
}

// interrupted is a context that ends on SIGINT, so a long walk stops cleanly.
func interrupted() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt)
}

func replayVerify(args []string) error {
	fs := flag.NewFlagSet("replay verify", flag.ContinueOnError)
	var rf replayFlags
	rf.register(fs)
	export := fs.String("export", "", "verify this export file (tether replay export) instead of a data dir")
	if _, err := cli.ParseArgs(fs, args, 0, "tether replay verify --data DIR [--archive DIR] | --archive DIR | --export FILE [--json]"); err != nil {
		return err
	}
	ctx, stop := interrupted()
	defer stop()
	if *export != "" {
		return verifyExport(ctx, &rf, *export)
	}
	if rf.data == "" && rf.archive != "" {
		return verifySegments(ctx, &rf)
	}
	l, err := rf.open(fs)
	if err != nil {
		return err
	}
	defer l.Close()
	progress, clear := report.Progress(os.Stderr, "verify")
	sum, err := audit.Verify(ctx, l, progress)
	clear()
	if err != nil && !errors.Is(err, audit.ErrGaps) {
		return report.Failed(err)
	}
	if perr := rf.print(sum, func() string { return report.Verify(sum) }); perr != nil {
		return perr
	}
	if err != nil {
		return report.Failed(err) // after the summary, which says what was checked around the gaps
	}
	return nil
}

// verifySegments checks archive segments alone, wherever they were copied.
func verifySegments(ctx context.Context, rf *replayFlags) error {
	sum, err := eventlog.VerifyArchive(ctx, nil, rf.archive, nil)
	if err != nil {
		return report.Failed(err)
	}
	return rf.print(sum, func() string { return report.Segments(sum) })
}

func verifyExport(ctx context.Context, rf *replayFlags, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sum, err := audit.VerifyExport(ctx, f)
	if err != nil {
		return report.Failed(err)
	}
	return rf.print(sum, func() string { return report.Export(sum) })
}

func replayHistory(args []string) error {
	fs := flag.NewFlagSet("replay history", flag.ContinueOnError)
	var rf replayFlags
	rf.register(fs)
	verify := fs.Bool("verify", true, "verify the chain from genesis through the last record of its stream first")
	pos, err := cli.ParseArgs(fs, args, 1, "tether replay history --data DIR JOB_ID|FLOW_ID|SCHEDULE_ID [--json]")
	if err != nil {
		return err
	}
	l, err := rf.open(fs)
	if err != nil {
		return err
	}
	defer l.Close()
	var entries []audit.Entry
	gaps, err := audit.History(l, pos[0], func(e audit.Entry) error {
		entries = append(entries, e)
		return nil
	})
	if err != nil {
		return err
	}
	last := entries[len(entries)-1].Seq
	var verified eventlog.Head
	var verifyErr error
	if *verify {
		ctx, stop := interrupted()
		defer stop()
		progress, clear := report.Progress(os.Stderr, "verify")
		verified, verifyErr = audit.VerifyRunThrough(ctx, l, last, progress)
		clear()
		if verifyErr != nil && !errors.Is(verifyErr, audit.ErrGaps) {
			return report.Failed(verifyErr)
		}
	}
	// What is not here goes to stderr, so that --json stays the list of events.
	holes := report.Gaps(os.Stderr, pos[0], gaps)
	if err := rf.print(entries, func() string { return report.History(pos[0], entries, *verify, verified, verifyErr) }); err != nil {
		return err
	}
	switch {
	case verifyErr != nil:
		return report.Failed(verifyErr)
	case holes > 0:
		return fmt.Errorf("FAILED: %d runs of records that may hold events of %s are missing from the archive", holes, pos[0])
	}
	return nil
}

func replayState(args []string) error {
	fs := flag.NewFlagSet("replay state", flag.ContinueOnError)
	var rf replayFlags
	rf.register(fs)
	at := fs.String("at", "", "a seq, or an RFC 3339 time (the state after the last record stamped at or before it)")
	if _, err := cli.ParseArgs(fs, args, 0, "tether replay state --data DIR --at SEQ|RFC3339 [--json]"); err != nil {
		return err
	}
	seq, when, err := parseAt(fs, *at)
	if err != nil {
		return err
	}
	l, err := rf.open(fs)
	if err != nil {
		return err
	}
	defer l.Close()
	if !when.IsZero() {
		if seq, err = audit.SeqAt(l, when); err != nil {
			return err
		}
	}
	ctx, stop := interrupted()
	defer stop()
	progress, clear := report.Progress(os.Stderr, "replay")
	set, head, err := audit.StateAt(ctx, l, seq, progress)
	clear()
	if err != nil {
		return report.Failed(err)
	}
	defer set.Close()
	st := audit.Summarize(set.Set, head)
	return rf.print(st, func() string { return report.State(st) })
}

// parseAt reads --at: a seq, or else a time.
func parseAt(fs *flag.FlagSet, at string) (uint64, time.Time, error) {
	if at == "" {
		return 0, time.Time{}, cli.BadFlagf(fs, "--at is required: a seq, or an RFC 3339 time")
	}
	if seq, err := strconv.ParseUint(at, 10, 64); err == nil {
		return seq, time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil || t.IsZero() {
		return 0, time.Time{}, cli.BadFlagf(fs, "--at %q is neither a seq nor an RFC 3339 time", at)
	}
	return 0, t, nil
}

func replayExport(args []string) error {
	fs := flag.NewFlagSet("replay export", flag.ContinueOnError)
	var rf replayFlags
	rf.register(fs)
	from := fs.Uint64("from", 0, "the first seq (0: the oldest record here, 1 unless the oldest segments were deleted)")
	to := fs.Uint64("to", 0, "the last seq (0: the head)")
	out := fs.String("out", "-", "the file to write (-: standard output)")
	if _, err := cli.ParseArgs(fs, args, 0, "tether replay export --data DIR [--from SEQ] [--to SEQ] [--out FILE] [--json]"); err != nil {
		return err
	}
	l, err := rf.open(fs)
	if err != nil {
		return err
	}
	defer l.Close()
	if *from == 0 {
		*from = l.Oldest().Seq + 1
	}
	ctx, stop := interrupted()
	defer stop()
	var n uint64
	if *out == "-" {
		n, err = audit.Export(ctx, l, os.Stdout, *from, *to, nil) // no progress: the records go to the terminal too
	} else {
		progress, clear := report.Progress(os.Stderr, "export")
		n, err = audit.ExportFile(ctx, l, *out, *from, *to, progress)
		clear()
	}
	if err != nil || *out == "-" || !rf.json {
		return err // on standard output the records are what was asked for, JSON already
	}
	last := *to
	if last == 0 {
		last = l.Head().Seq
	}
	written := struct {
		File    string `json:"file"`
		Records uint64 `json:"records"`
		From    uint64 `json:"from"`
		To      uint64 `json:"to"`
	}{*out, n, *from, last}
	return rf.print(written, nil)
}

func replayReceipt(args []string) error {
	fs := flag.NewFlagSet("replay receipt", flag.ContinueOnError)
	var rf replayFlags
	rf.register(fs)
	seq := fs.Uint64("seq", 0, "the receipt's seq")
	hash := fs.String("hash", "", "the receipt's hash (64 hex digits)")
	if _, err := cli.ParseArgs(fs, args, 0, "tether replay receipt --data DIR --seq N --hash H [--json]"); err != nil {
		return err
	}
	if *seq == 0 || *hash == "" {
		return cli.BadFlagf(fs, "--seq and --hash are required")
	}
	if b, err := hex.DecodeString(*hash); err != nil || len(b) != 32 {
		return cli.BadFlagf(fs, "--hash %q: want the receipt's hash, 64 hex digits", *hash)
	}
	l, err := rf.open(fs)
	if err != nil {
		return err
	}
	defer l.Close()
	ctx, stop := interrupted()
	defer stop()
	r, start, err := audit.CheckReceipt(ctx, l, *seq, *hash)
	if err != nil {
		return report.Failed(err)
	}
	out := struct {
		Confirmed bool      `json:"confirmed"`
		Seq       uint64    `json:"seq"`
		Hash      string    `json:"hash"`
		Time      time.Time `json:"time"`
		Stream    string    `json:"stream"`
		Type      string    `json:"type"`
	}{true, r.Seq, r.Hash.String(), r.Time, r.Stream, r.Type}
	return rf.print(out, func() string { return report.Receipt(r, start) })
}
