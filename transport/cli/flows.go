package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

// Flow runs tether flow SUBCOMMAND: submit, get, ls, watch, cancel.
func Flow(args []string) error {
	return Subcommands("flow", []Command{
		{"submit", "submit a flow file: submit FILE --name N (FILE - reads stdin)", flowSubmit},
		{"get", "show a flow and its steps", byID("flow get", "tether flow get FLOW_ID", (*client.Client).Flow, showFlow)},
		{"ls", "list flows, newest first", flowList},
		{"watch", "stream a flow's events until it ends", flowWatch},
		{"cancel", "cancel a flow: skip what waits, cancel what runs", byID("flow cancel", "tether flow cancel FLOW_ID", (*client.Client).CancelFlow, showFlow)},
	}, args)
}

func flowSubmit(args []string) error {
	fs := flag.NewFlagSet("flow submit", flag.ContinueOnError)
	var cf ClientFlags
	cf.Register(fs, apiKeyHelp)
	name := fs.String("name", "", "the flow's name (default: flow.name in the file)")
	key := fs.String("idempotency-key", "", "submit at most once under this key (24 h)")
	watch := fs.Bool("watch", false, "stream the flow's events until it ends")
	pos, err := ParseArgs(fs, args, 1, "tether flow submit FILE [--name N]")
	if err != nil {
		return err
	}
	var data []byte
	if pos[0] == "-" {
		data, err = io.ReadAll(io.LimitReader(os.Stdin, 16<<20))
	} else {
		data, err = os.ReadFile(pos[0])
	}
	if err != nil {
		return err
	}
	f, err := cf.Client().SubmitFlow(callerTrace(), *name, data, *key)
	if err != nil {
		return err
	}
	if err := cf.Print(f, func() string { return showFlow(f) }); err != nil || !*watch {
		return err
	}
	if f.Status == wire.FlowExpired {
		return fmt.Errorf("flow %s ended and has left every view; there is nothing to watch", f.ID)
	}
	return watchFlow(cf, f.ID, 0)
}

// showFlow prints a flow and its steps, in the order they can run.
func showFlow(f *wire.Flow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "flow %s  %s  %s", f.ID, f.Name, f.Status)
	if f.FailedStep != "" {
		fmt.Fprintf(&b, " (at step %s)", f.FailedStep)
	}
	if f.IdempotentHit != nil && *f.IdempotentHit {
		b.WriteString("  (submitted before with this idempotency key)")
	}
	if f.Status == wire.FlowExpired {
		b.WriteString("\nthe flow ended and its retention passed: it has left every view, and its steps and outcome are no longer kept\n")
		return b.String()
	}
	fmt.Fprintf(&b, "\nfile: %d bytes, sha256 %s\n", f.YAMLBytes, f.YAMLSHA256)
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "STEP\tSTATUS\tJOB\tNEEDS\tWAITING FOR")
	for _, name := range stepOrder(f.Steps) {
		s := f.Steps[name]
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", name, s.Status, orDash(s.JobID), orDash(strings.Join(s.Needs, ",")),
			orDash(strings.Join(s.WaitingFor, ",")))
	}
	_ = w.Flush()
	return b.String()
}

// stepOrder lists steps so that each comes after the steps it needs, by name otherwise.
func stepOrder(steps map[string]wire.FlowStep) []string {
	names := slices.Sorted(maps.Keys(steps))
	placed := map[string]bool{}
	var out []string
	for len(out) < len(names) {
		progressed := false
		for _, n := range names {
			if placed[n] {
				continue
			}
			ready := true
			for _, need := range steps[n].Needs {
				ready = ready && (placed[need] || steps[need].Status == "")
			}
			if ready {
				placed[n], progressed = true, true
				out = append(out, n)
			}
		}
		if !progressed { // not a DAG: cannot come from a server, but print everything anyway
			for _, n := range names {
				if !placed[n] {
					out = append(out, n)
				}
			}
		}
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func flowList(args []string) error {
	fs := flag.NewFlagSet("flow ls", flag.ContinueOnError)
	var cf ClientFlags
	cf.Register(fs, apiKeyHelp)
	status := fs.String("status", "", "only flows of this status: running, succeeded, failed, cancelled")
	limit := fs.Int("limit", 50, "at most this many")
	cursor := fs.String("cursor", "", "the next_cursor of the previous page")
	if _, err := ParseArgs(fs, args, 0, "tether flow ls [--status S]"); err != nil {
		return err
	}
	list, err := cf.Client().Flows(context.Background(), *status, *cursor, *limit)
	if err != nil {
		return err
	}
	return cf.Print(list, func() string {
		var b strings.Builder
		w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tNAME\tSTATUS\tSTEPS\tCREATED")
		for _, f := range list.Flows {
			done := 0
			for _, s := range f.Steps {
				if s.Status == "succeeded" {
					done++
				}
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%d/%d succeeded\t%s\n", f.ID, f.Name, f.Status, done, len(f.Steps), f.CreatedAt.Format(time.RFC3339))
		}
		_ = w.Flush()
		if list.NextCursor != "" {
			fmt.Fprintf(&b, "more: --cursor %s\n", list.NextCursor)
		}
		return b.String()
	})
}

func flowWatch(args []string) error {
	fs := flag.NewFlagSet("flow watch", flag.ContinueOnError)
	var cf ClientFlags
	cf.Register(fs, apiKeyHelp)
	after := fs.Int("after", 0, "start after this event number")
	pos, err := ParseArgs(fs, args, 1, "tether flow watch FLOW_ID")
	if err != nil {
		return err
	}
	return watchFlow(cf, pos[0], *after)
}

// watchFlow prints a flow's events until it ends; it fails unless the flow succeeded.
func watchFlow(cf ClientFlags, id string, after int) error {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	c := cf.Client()
	f, err := c.Flow(ctx, id)
	if err != nil {
		return err
	}
	stepOf := map[string]string{}
	enc := json.NewEncoder(os.Stdout)
	status, err := c.WatchFlow(ctx, id, after, func(e wire.Event) error {
		if cf.json {
			return enc.Encode(e)
		}
		var d struct {
			JobID    string `json:"job_id"`
			FlowStep string `json:"flow_step"`
			Step     string `json:"step"`
		}
		_ = json.Unmarshal(e.Data, &d)
		if d.FlowStep != "" {
			stepOf[d.JobID] = d.FlowStep
		}
		step := cmp.Or(d.Step, stepOf[d.JobID])
		if step == "" && d.JobID != "" {
			for name, s := range f.Steps {
				if s.JobID == d.JobID {
					step = name
				}
			}
		}
		_, err := fmt.Printf("%4d  %s  %-12s %-22s %s\n", e.Number, e.Time.Format("15:04:05.000"), orDash(step), e.Type, summarize(e))
		return err
	})
	return watchEnded(cf, "flow", status, err)
}
