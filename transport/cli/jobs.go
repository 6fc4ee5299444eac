package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

// Job runs tether job SUBCOMMAND: submit, get, ls, cancel, retry and the rest, on one server.
func Job(args []string) error {
	return Subcommands("job", []Command{
		{"submit", "submit a job", jobSubmit},
		{"get", "show a job", byID("job get", "tether job get JOB_ID", (*client.Client).Get, describe)},
		{"explain", "say why a job is not running, whom it runs on, or how it ended", byID("job explain", "tether job explain JOB_ID", (*client.Client).Explain,
			func(x *wire.Explanation) string { return fmt.Sprintf("%s: %s\n", x.Code, x.Message) })},
		{"ls", "list jobs", jobList},
		{"cancel", "cancel a job", jobAction("cancel")},
		{"retry", "re-drive a dead-lettered job", jobAction("retry")},
		{"cancel-all", "cancel every live job a filter matches", jobBulk("cancel")},
		{"retry-all", "re-drive every dead letter a filter matches", jobBulk("retry")},
		{"delete", "take a finished job out of every view now", jobDelete},
		{"purge", "take old dead letters out of every view", jobPurge},
		{"watch", "stream a job's events until it ends", jobWatch},
	}, args)
}

const apiKeyHelp = "API key (none under --auth none)"

// Queue runs tether queue SUBCOMMAND: ls, pause, resume.
func Queue(args []string) error {
	return Subcommands("queue", []Command{
		{"ls", "list queues: depth, leased, scheduled, dead, paused", queueList},
		{"pause", "stop a queue assigning jobs (it still takes submits)", queuePause(true)},
		{"resume", "let a paused queue assign jobs again", queuePause(false)},
		{"limits", "set or clear a queue's own max_running_per_key (leases one concurrency key may hold at once)", queueLimits},
	}, args)
}

func queueList(args []string) error {
	fs := flag.NewFlagSet("queue ls", flag.ContinueOnError)
	var cf ClientFlags
	cf.Register(fs, apiKeyHelp)
	if _, err := ParseArgs(fs, args, 0, "tether queue ls"); err != nil {
		return err
	}
	qs, err := cf.Client().Queues(context.Background())
	if err != nil {
		return err
	}
	return cf.Print(qs, func() string {
		var b strings.Builder
		w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "QUEUE\tDEPTH\tLEASED\tSCHEDULED\tDEAD\tPER KEY\tSTATE")
		for _, q := range qs.Queues {
			state := "active"
			if q.Paused {
				state = "paused since " + q.PausedSince.Format(time.RFC3339)
			}
			perKey := "-" // unlimited
			if q.MaxRunningPerKey > 0 {
				perKey = strconv.Itoa(q.MaxRunningPerKey)
			}
			if q.OwnKeyLimit {
				perKey += " (own)"
			}
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%s\t%s\n", q.Name, q.Depth, q.Leased, q.Scheduled, q.Dead, perKey, state)
		}
		_ = w.Flush()
		return b.String()
	})
}

func queuePause(paused bool) func([]string) error {
	action := map[bool]string{true: "pause", false: "resume"}[paused]
	return func(args []string) error {
		fs := flag.NewFlagSet("queue "+action, flag.ContinueOnError)
		var cf ClientFlags
		cf.Register(fs, apiKeyHelp+", or the admin token with --tenant")
		tenant := fs.String("tenant", "", "the tenant whose queue it is, with the admin token as --token")
		pos, err := ParseArgs(fs, args, 1, "tether queue "+action+" QUEUE [--tenant T]")
		if err != nil {
			return err
		}
		q, err := cf.Client().PauseQueue(context.Background(), *tenant, pos[0], paused)
		if err != nil {
			return err
		}
		return cf.Print(q, func() string {
			if q.Paused {
				return fmt.Sprintf("queue %s paused since %s: it takes submits and assigns nothing\n", q.Queue, q.PausedSince.Format(time.RFC3339))
			}
			return fmt.Sprintf("queue %s assigns jobs\n", q.Queue)
		})
	}
}

func queueLimits(args []string) error {
	fs := flag.NewFlagSet("queue limits", flag.ContinueOnError)
	var cf ClientFlags
	cf.Register(fs, apiKeyHelp+", or the admin token with --tenant")
	tenant := fs.String("tenant", "", "the tenant whose queue it is, with the admin token as --token")
	perKey := fs.Int("max-running-per-key", 0, "leases one concurrency key may hold at once in the queue (0: unlimited)")
	clearOwn := fs.Bool("clear", false, "clear the queue's own limit: the tenant's applies")
	const usage = "tether queue limits QUEUE (--max-running-per-key N | --clear) [--tenant T]"
	pos, err := ParseArgs(fs, args, 1, usage)
	if err != nil {
		return err
	}
	given := setFlags(fs)
	var n *int
	switch {
	case given["max-running-per-key"] == *clearOwn:
		return BadFlagf(fs, "give --max-running-per-key N or --clear, one of them; usage: %s", usage)
	case *perKey < 0:
		return BadFlagf(fs, "--max-running-per-key is 0 (unlimited) or more")
	case !*clearOwn:
		n = perKey
	}
	q, err := cf.Client().SetQueueLimits(context.Background(), *tenant, pos[0], n)
	if err != nil {
		return err
	}
	return cf.Print(q, func() string {
		from := "the tenant's"
		if q.OwnKeyLimit {
			from = "its own"
		}
		return fmt.Sprintf("queue %s: max_running_per_key %d (0: unlimited), %s\n", q.Queue, q.MaxRunningPerKey, from)
	})
}

func jobSubmit(args []string) error {
	fs := flag.NewFlagSet("job submit", flag.ContinueOnError)
	var cf ClientFlags
	cf.Register(fs, apiKeyHelp)
	job := jobFlags(fs)
	delay := fs.Duration("delay", 0, "run no earlier than this from now")
	key := fs.String("idempotency-key", "", "a key that makes resubmitting safe for 24 h")
	quiet := fs.Bool("quiet", false, "print only the job id (for scripts: JOB=$(tether job submit ... --quiet))")
	if _, err := ParseArgs(fs, args, 0, "tether job submit --queue Q --type T --payload JSON"); err != nil {
		return err
	}
	req, err := job()
	if err != nil {
		return err
	}
	req.DelaySeconds, req.IdempotencyKey = delay.Seconds(), *key
	j, err := cf.Client().Submit(callerTrace(), req)
	if err != nil {
		return err
	}
	if *quiet {
		_, err := fmt.Println(j.ID)
		return err
	}
	return cf.Print(j, func() string {
		hit := ""
		if j.IdempotentHit != nil && *j.IdempotentHit {
			hit = " (the job this idempotency key already made)"
		}
		return fmt.Sprintf("%s %s%s\nreceipt seq=%d hash=%s\n", j.ID, j.Status, hit, j.Receipt.Seq, j.Receipt.Hash)
	})
}

// jobFlags registers the flags of a job's definition (what job submit and schedule create
// share); the function it returns reads them once they are parsed.
func jobFlags(fs *flag.FlagSet) func() (wire.SubmitRequest, error) {
	queue := fs.String("queue", "default", "queue")
	typ := fs.String("type", "job", "job type")
	payload := fs.String("payload", "", "payload JSON; @FILE reads a file, @- stdin")
	priority := fs.Int("priority", 0, "priority, -100..100 (higher first)")
	maxAttempts := fs.Int("max-attempts", 0, "attempts before the job is dead-lettered (0: server default, 5)")
	leaseTTL := fs.Duration("lease-ttl", 0, "lease time-to-live (0: server default, 30s)")
	resultTTL := fs.Duration("result-ttl", 0, "how long the job stays once it succeeded or was cancelled (0: the server's --retain)")
	concurrencyKey := fs.String("concurrency-key", "", "a key (a customer, a token) whose jobs hold at most the queue's max_running_per_key leases at once")
	labels := labelFlags{}
	fs.Var(labels, "label", "key=value label (repeatable)")
	var rates rateLimitFlags
	fs.Var(&rates, "rate-limit", "NAME or NAME:KEY: a rate limit of the tenant each lease takes a token from, in KEY's bucket (repeatable)")
	return func() (wire.SubmitRequest, error) {
		req := wire.SubmitRequest{Queue: *queue, Type: *typ, Priority: *priority, MaxAttempts: *maxAttempts,
			LeaseTTLSeconds: leaseTTL.Seconds(), ResultTTLSeconds: resultTTL.Seconds(), ConcurrencyKey: *concurrencyKey, RateLimits: []wire.RateLimitUse(rates)}
		if len(labels) > 0 {
			req.Labels = labels
		}
		if *payload != "" {
			raw, err := readArg(*payload)
			if err != nil {
				return req, err
			}
			if !json.Valid(raw) {
				return req, BadFlagf(fs, "--payload is not valid JSON")
			}
			req.Payload = raw
		}
		return req, nil
	}
}

func describe(j *wire.Job) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(w, "%s\t%s\n", k, v)
		}
	}
	row("id", j.ID)
	row("status", j.Status)
	row("queue/type", j.Queue+"/"+j.Type)
	row("concurrency key", j.ConcurrencyKey)
	for _, u := range j.RateLimits {
		row("rate limit", rateLimitText(u))
	}
	row("attempt", fmt.Sprintf("%d of %d", j.Attempt, j.MaxAttempts))
	if j.Lease != nil {
		row("lease", fmt.Sprintf("%s (worker %s, until %s)", j.Lease.LeaseID, j.Lease.WorkerID, j.Lease.ExpiresAt.Format(time.RFC3339)))
	}
	if j.RunAt != nil {
		row("run at", j.RunAt.Format(time.RFC3339))
	}
	if j.CancelRequested {
		row("cancel", "requested")
	}
	row("payload", string(j.Payload))
	row("output", string(j.Output))
	if j.Error != nil {
		row("error", j.Error.Code+": "+j.Error.Message)
	}
	row("dead reason", j.DeadReason)
	row("created", j.CreatedAt.Format(time.RFC3339))
	row("updated", j.UpdatedAt.Format(time.RFC3339))
	if j.ExpiresAt != nil {
		row("expires", j.ExpiresAt.Format(time.RFC3339))
	}
	if j.Receipt != nil {
		row("receipt", fmt.Sprintf("seq=%d hash=%s", j.Receipt.Seq, j.Receipt.Hash))
	}
	_ = w.Flush()
	return b.String()
}

func jobList(args []string) error {
	fs := flag.NewFlagSet("job ls", flag.ContinueOnError)
	var cf ClientFlags
	cf.Register(fs, apiKeyHelp)
	var o client.ListOptions
	fs.StringVar(&o.Status, "status", "", "only jobs with this status")
	fs.StringVar(&o.Queue, "queue", "", "only jobs of this queue")
	fs.StringVar(&o.Type, "type", "", "only jobs of this type")
	fs.StringVar(&o.Label, "label", "", "only jobs with this label, as key=value")
	fs.BoolVar(&o.Newest, "newest", false, "newest jobs first")
	fs.StringVar(&o.Cursor, "cursor", "", "the next_cursor of the previous page")
	fs.IntVar(&o.Limit, "limit", 50, "jobs per page, 1..1000")
	if _, err := ParseArgs(fs, args, 0, "tether job ls [--status S] [--queue Q] [--label K=V] [--newest]"); err != nil {
		return err
	}
	if o.Limit < 1 || o.Limit > 1000 {
		return BadFlagf(fs, "--limit %d: want 1..1000", o.Limit)
	}
	l, err := cf.Client().List(context.Background(), o)
	if err != nil {
		return err
	}
	return cf.Print(l, func() string {
		var b strings.Builder
		w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tSTATUS\tQUEUE\tTYPE\tATTEMPT\tUPDATED")
		for _, j := range l.Jobs {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d/%d\t%s\n", j.ID, j.Status, j.Queue, j.Type, j.Attempt, j.MaxAttempts, j.UpdatedAt.Format(time.RFC3339))
		}
		_ = w.Flush()
		if l.NextCursor != "" {
			fmt.Fprintf(&b, "more: --cursor %s\n", l.NextCursor)
		}
		return b.String()
	})
}

func jobAction(action string) func([]string) error {
	return func(args []string) error {
		fs := flag.NewFlagSet("job "+action, flag.ContinueOnError)
		var cf ClientFlags
		cf.Register(fs, apiKeyHelp)
		pos, err := ParseArgs(fs, args, 1, "tether job "+action+" JOB_ID")
		if err != nil {
			return err
		}
		c := cf.Client()
		do := c.Cancel
		if action == "retry" {
			do = c.Retry
		}
		j, err := do(context.Background(), pos[0])
		if err != nil {
			return err
		}
		return cf.Print(j, func() string { return describe(j) })
	}
}

// jobBulk runs a bulk cancel or re-drive page after page until the filter is done, or until the
// cursor stops moving (a re-drive held back by the quota), and prints the totals.
func jobBulk(action string) func([]string) error {
	return func(args []string) error {
		fs := flag.NewFlagSet("job "+action+"-all", flag.ContinueOnError)
		var cf ClientFlags
		cf.Register(fs, apiKeyHelp)
		var req wire.BulkRequest
		fs.StringVar(&req.Queue, "queue", "", "only jobs of this queue")
		fs.StringVar(&req.Type, "type", "", "only jobs of this type")
		fs.StringVar(&req.Label, "label", "", "only jobs with this label, as key=value")
		if action == "cancel" {
			fs.StringVar(&req.Status, "status", "", "only jobs with this status: queued, scheduled or leased (default: all three)")
		}
		before := fs.String("created-before", "", "only jobs created before this time (RFC 3339) or this long ago (a duration: 1h)")
		all := fs.Bool("all", false, "act on every job the other flags leave in, even with no filter given")
		if _, err := ParseArgs(fs, args, 0, "tether job "+action+"-all [--queue Q] [--type T] [--label K=V] [--created-before T] [--all]"); err != nil {
			return err
		}
		if *before != "" {
			t, err := pastTime(*before)
			if err != nil {
				return BadFlagf(fs, "--created-before %q: %v", *before, err)
			}
			req.CreatedBefore = &t
		}
		if req.Queue == "" && req.Type == "" && req.Label == "" && req.Status == "" && req.CreatedBefore == nil && !*all {
			return BadFlagf(fs, "no filter given: name one, or pass --all to %s every job", map[string]string{"cancel": "cancel", "retry": "re-drive"}[action])
		}
		req.All = *all // the server, too, acts on no filter only when told
		c := cf.Client()
		req.Cursor = projections.CursorFirst // so that a cursor that does not move shows as one
		var done, requested, matched int
		skipped := map[string]int{}
		var last *wire.Receipt
		for {
			var n int
			var next string
			if action == "cancel" {
				r, err := c.CancelMatching(context.Background(), req)
				if err != nil {
					return err
				}
				n, next, last = r.Cancelled+r.CancelRequested, r.NextCursor, cmp.Or(r.Receipt, last)
				done, requested, matched = done+r.Cancelled, requested+r.CancelRequested, matched+r.Matched
				addCounts(skipped, r.Skipped)
			} else {
				r, err := c.RedriveMatching(context.Background(), req)
				if err != nil {
					return err
				}
				n, next, last = r.Redriven, r.NextCursor, cmp.Or(r.Receipt, last)
				done, matched = done+r.Redriven, matched+r.Matched
				addCounts(skipped, r.Skipped)
			}
			if next == "" || n == 0 && next == req.Cursor { // done, or held by the quota where it began
				break
			}
			req.Cursor = next
		}
		out := map[string]any{"matched": matched, "skipped": skipped, "receipt": last}
		if action == "cancel" {
			out["cancelled"], out["cancel_requested"] = done, requested
		} else {
			out["redriven"] = done
		}
		return cf.Print(out, func() string {
			var b strings.Builder
			if action == "cancel" {
				fmt.Fprintf(&b, "%d jobs cancelled, %d leased jobs asked to stop", done, requested)
			} else {
				fmt.Fprintf(&b, "%d dead letters re-driven", done)
			}
			for _, code := range slices.Sorted(maps.Keys(skipped)) {
				fmt.Fprintf(&b, ", %d skipped (%s)", skipped[code], code)
			}
			b.WriteString("\n")
			if last != nil {
				fmt.Fprintf(&b, "receipt seq=%d hash=%s\n", last.Seq, last.Hash)
			}
			return b.String()
		})
	}
}

func addCounts(into, from map[string]int) {
	for k, n := range from {
		into[k] += n
	}
}

// pastTime reads an RFC 3339 time, or a duration meaning that long ago.
func pastTime(s string) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, errors.New("a duration ago must be more than 0")
		}
		return time.Now().Add(-d), nil
	}
	return time.Parse(time.RFC3339, s)
}

func jobDelete(args []string) error {
	fs := flag.NewFlagSet("job delete", flag.ContinueOnError)
	var cf ClientFlags
	cf.Register(fs, apiKeyHelp)
	pos, err := ParseArgs(fs, args, 1, "tether job delete JOB_ID")
	if err != nil {
		return err
	}
	d, err := cf.Client().Delete(context.Background(), pos[0])
	if err != nil {
		return err
	}
	return cf.Print(d, func() string {
		return fmt.Sprintf("%s deleted\nreceipt seq=%d hash=%s\n", d.ID, d.Receipt.Seq, d.Receipt.Hash)
	})
}

func jobPurge(args []string) error {
	fs := flag.NewFlagSet("job purge", flag.ContinueOnError)
	var cf ClientFlags
	cf.Register(fs, apiKeyHelp)
	queue := fs.String("queue", "", "only this queue's dead letters (default: every queue)")
	olderThan := fs.Duration("older-than", 0, "only dead letters that died at least this long ago (required; 0s takes them all)")
	if _, err := ParseArgs(fs, args, 0, "tether job purge --older-than 24h [--queue Q]"); err != nil {
		return err
	}
	if !setFlags(fs)["older-than"] {
		return BadFlagf(fs, "--older-than is required: how old a dead letter must be to go (0s: all of them)")
	}
	if *olderThan < 0 {
		return BadFlagf(fs, "--older-than %s must not be negative", *olderThan)
	}
	c := cf.Client()
	total := 0
	var last *wire.PurgeResponse
	for { // a call takes at most 1,000
		p, err := c.PurgeDead(context.Background(), *queue, *olderThan)
		if err != nil {
			return err
		}
		total += p.Purged
		last = p
		if !p.More || p.Purged == 0 {
			break
		}
	}
	last.Purged = total
	return cf.Print(last, func() string { return fmt.Sprintf("%d dead letters purged\n", total) })
}

func jobWatch(args []string) error {
	fs := flag.NewFlagSet("job watch", flag.ContinueOnError)
	var cf ClientFlags
	cf.Register(fs, apiKeyHelp)
	after := fs.Int("after", 0, "start after this event number")
	pos, err := ParseArgs(fs, args, 1, "tether job watch JOB_ID")
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	enc := json.NewEncoder(os.Stdout)
	status, err := cf.Client().Watch(ctx, pos[0], *after, func(e wire.Event) error {
		if cf.json {
			return enc.Encode(e)
		}
		_, err := fmt.Printf("%4d  %s  %-22s %s\n", e.Number, e.Time.Format("15:04:05.000"), e.Type, summarize(e))
		return err
	})
	return watchEnded(cf, "job", status, err)
}

// watchEnded says how a watch ended, and fails unless what it watched succeeded.
func watchEnded(cf ClientFlags, what, status string, err error) error {
	if err != nil {
		return err
	}
	if !cf.json {
		fmt.Printf("done: %s\n", status)
	}
	if status != "succeeded" {
		return &endedError{what: what, status: status}
	}
	return nil
}

// endedError is a watched job or flow that ended otherwise than succeeded.
type endedError struct{ what, status string }

func (e *endedError) Error() string { return fmt.Sprintf("the %s ended %s", e.what, e.status) }

// summarize shows what matters of an event on one line.
func summarize(e wire.Event) string {
	var d map[string]any
	_ = json.Unmarshal(e.Data, &d)
	var parts []string
	for _, k := range []string{"event_type", "data", "worker_id", "attempt", "error_code", "message", "status", "step", "reason", "run_at", "output"} {
		if v, ok := d[k]; ok {
			b, _ := json.Marshal(v)
			parts = append(parts, k+"="+string(b))
		}
	}
	s := strings.Join(parts, " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// Admin runs tether admin SUBCOMMAND: apikey, enroll-token, quota.
func Admin(args []string) error {
	return Subcommands("admin", []Command{
		{"apikey", "create or revoke an API key: apikey create --tenant T | apikey revoke ID", adminAPIKey},
		{"enroll-token", "make a token that registers workers: --tenant T --uses N --ttl D", adminEnrollToken},
		{"quota", "set a tenant's limits: --tenant T --max-active N --max-running N", adminQuota},
	}, args)
}

const adminTokenHelp = "the admin token (none under --auth none)"

func adminAPIKey(args []string) error {
	fs := flag.NewFlagSet("admin apikey", flag.ContinueOnError)
	var cf ClientFlags
	cf.Register(fs, adminTokenHelp)
	tenant := fs.String("tenant", "", "tenant of the new key")
	quiet := fs.Bool("quiet", false, "print only the new key (for scripts: KEY=$(tether admin apikey create ... --quiet))")
	pos, err := ParseArgs(fs, args, -1, "")
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 1 && pos[0] == "create":
		if *tenant == "" {
			return BadFlagf(fs, "--tenant is required")
		}
		k, err := cf.Client().CreateAPIKey(context.Background(), *tenant)
		if err != nil {
			return err
		}
		if *quiet {
			_, err := fmt.Println(k.Key)
			return err
		}
		return cf.Print(k, func() string {
			return fmt.Sprintf("api key %s for tenant %s (shown only now):\n%s\n", k.ID, k.Tenant, k.Key)
		})
	case len(pos) == 2 && pos[0] == "revoke":
		if err := cf.Client().RevokeAPIKey(context.Background(), pos[1]); err != nil {
			return err
		}
		return cf.Print(map[string]string{"revoked": pos[1]}, func() string { return "revoked " + pos[1] + "\n" })
	}
	return BadFlagf(fs, "usage: tether admin apikey create --tenant T | tether admin apikey revoke KEY_ID")
}

func adminEnrollToken(args []string) error {
	fs := flag.NewFlagSet("admin enroll-token", flag.ContinueOnError)
	var cf ClientFlags
	cf.Register(fs, adminTokenHelp)
	tenant := fs.String("tenant", "", "tenant the workers join")
	uses := fs.Int("uses", 1, "how many workers may register with it")
	ttl := fs.Duration("ttl", 24*time.Hour, "how long it lasts")
	quiet := fs.Bool("quiet", false, "print only the new token (for scripts: ENROLL=$(tether admin enroll-token ... --quiet))")
	if _, err := ParseArgs(fs, args, 0, "tether admin enroll-token --tenant T [--uses N] [--ttl D]"); err != nil {
		return err
	}
	switch {
	case *tenant == "":
		return BadFlagf(fs, "--tenant is required")
	case *uses < 1:
		return BadFlagf(fs, "--uses %d: a token must let at least one worker register", *uses)
	case *ttl <= 0:
		return BadFlagf(fs, "--ttl %s: want a positive duration", *ttl)
	}
	t, err := cf.Client().CreateEnrollToken(context.Background(), *tenant, *uses, *ttl)
	if err != nil {
		return err
	}
	if *quiet {
		_, err := fmt.Println(t.Token)
		return err
	}
	return cf.Print(t, func() string {
		return fmt.Sprintf("enroll token for tenant %s, %d use(s), until %s (shown only now):\n%s\n", t.Tenant, t.Uses, t.ExpiresAt.Format(time.RFC3339), t.Token)
	})
}

func adminQuota(args []string) error {
	fs := flag.NewFlagSet("admin quota", flag.ContinueOnError)
	var cf ClientFlags
	cf.Register(fs, adminTokenHelp)
	tenant := fs.String("tenant", "", "tenant (required)")
	maxActive := fs.Int("max-active", 0, "non-terminal jobs plus reservations (0: unlimited); left out: unchanged")
	maxRunning := fs.Int("max-running", 0, "leased jobs at once (0: unlimited); left out: unchanged")
	maxPerKey := fs.Int("max-running-per-key", 0, "leases one concurrency key may hold at once in a queue without its own limit (0: unlimited); left out: unchanged")
	const usage = "tether admin quota --tenant T [--max-active N] [--max-running N] [--max-running-per-key N]"
	if _, err := ParseArgs(fs, args, 0, usage); err != nil {
		return err
	}
	given := setFlags(fs)
	var req wire.QuotaRequest
	if given["max-active"] {
		req.MaxActive = maxActive
	}
	if given["max-running"] {
		req.MaxRunning = maxRunning
	}
	if given["max-running-per-key"] {
		req.MaxRunningPerKey = maxPerKey
	}
	switch {
	case *tenant == "":
		return BadFlagf(fs, "--tenant is required; usage: %s", usage)
	case req == wire.QuotaRequest{}:
		return BadFlagf(fs, "nothing to change: give --max-active, --max-running, --max-running-per-key or some of them; usage: %s", usage)
	case *maxActive < 0 || *maxRunning < 0 || *maxPerKey < 0:
		return BadFlagf(fs, "--max-active, --max-running and --max-running-per-key are 0 (unlimited) or more")
	}
	q, err := cf.Client().SetLimits(context.Background(), *tenant, req)
	if err != nil {
		return err
	}
	return cf.Print(q, func() string {
		return fmt.Sprintf("tenant %s: max_active %d, max_running %d, max_running_per_key %d (0: unlimited); active %d, running %d\n",
			q.Tenant, q.MaxActive, q.MaxRunning, q.MaxRunningPerKey, q.Active, q.Running)
	})
}
