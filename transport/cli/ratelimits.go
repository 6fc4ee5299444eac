package cli

import (
	"context"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/tetherhq/tether/transport/wire"
)

// RateLimit runs tether ratelimit SUBCOMMAND: ls, set, rm.
func RateLimit(args []string) error {
	return Subcommands("ratelimit", []Command{
		{"ls", "list the tenant's rate limits: rate, burst, tokens now", rateLimitList},
		{"set", "set a rate limit, new or changed: RATE tokens a second, at most BURST held", rateLimitSet},
		{"rm", "delete a rate limit: the jobs that name it are no longer held back by it", rateLimitDelete},
	}, args)
}

const rateLimitTokenHelp = apiKeyHelp + ", or the admin token with --tenant"

func rateLimitList(args []string) error {
	fs := flag.NewFlagSet("ratelimit ls", flag.ContinueOnError)
	var cf ClientFlags
	cf.Register(fs, rateLimitTokenHelp)
	tenant := fs.String("tenant", "", "the tenant whose limits they are, with the admin token as --token")
	if _, err := ParseArgs(fs, args, 0, "tether ratelimit ls [--tenant T]"); err != nil {
		return err
	}
	ls, err := cf.Client().RateLimits(context.Background(), *tenant)
	if err != nil {
		return err
	}
	return cf.Print(ls, func() string {
		if len(ls.RateLimits) == 0 {
			return "no rate limits; set one with tether ratelimit set NAME --rate R\n"
		}
		var b strings.Builder
		w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "NAME\tRATE/S\tBURST\tTOKENS\tKEYS BELOW FULL")
		for _, l := range ls.RateLimits {
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d\n", l.Name, strconv.FormatFloat(l.Rate, 'g', -1, 64), l.Burst,
				strconv.FormatFloat(l.Tokens, 'f', 2, 64), l.BucketsBelowFull)
		}
		_ = w.Flush()
		return b.String()
	})
}

func rateLimitSet(args []string) error {
	fs := flag.NewFlagSet("ratelimit set", flag.ContinueOnError)
	var cf ClientFlags
	cf.Register(fs, rateLimitTokenHelp)
	tenant := fs.String("tenant", "", "the tenant whose limit it is, with the admin token as --token")
	rate := fs.Float64("rate", 0, "tokens a second, e.g. 5, or 0.5 for one every 2 s (required)")
	burst := fs.Int("burst", 0, "tokens held at most (0: the rate rounded up, at least 1)")
	const usage = "tether ratelimit set NAME --rate R [--burst B] [--tenant T]"
	pos, err := ParseArgs(fs, args, 1, usage)
	if err != nil {
		return err
	}
	if !setFlags(fs)["rate"] || !(*rate > 0) || math.IsInf(*rate, 0) {
		return BadFlagf(fs, "give --rate, tokens a second above 0; usage: %s", usage)
	}
	if *burst < 0 {
		return BadFlagf(fs, "--burst is 1 or more (0: the default)")
	}
	l, err := cf.Client().SetRateLimit(context.Background(), *tenant, pos[0], *rate, *burst)
	if err != nil {
		return err
	}
	return cf.Print(l, func() string {
		return fmt.Sprintf("rate limit %s: %s a second, burst %d (%s tokens now)\n", l.Name, strconv.FormatFloat(l.Rate, 'g', -1, 64), l.Burst,
			strconv.FormatFloat(l.Tokens, 'f', 2, 64))
	})
}

func rateLimitDelete(args []string) error {
	fs := flag.NewFlagSet("ratelimit rm", flag.ContinueOnError)
	var cf ClientFlags
	cf.Register(fs, rateLimitTokenHelp)
	tenant := fs.String("tenant", "", "the tenant whose limit it is, with the admin token as --token")
	pos, err := ParseArgs(fs, args, 1, "tether ratelimit rm NAME [--tenant T]")
	if err != nil {
		return err
	}
	d, err := cf.Client().DeleteRateLimit(context.Background(), *tenant, pos[0])
	if err != nil {
		return err
	}
	return cf.Print(d, func() string { return fmt.Sprintf("rate limit %s deleted\n", d.Name) })
}

// rateLimitText shows a rate limit a job takes tokens from: its name, and its bucket's key.
func rateLimitText(u wire.RateLimitUse) string {
	if u.Key != "" {
		return u.Name + " (key " + u.Key + ")"
	}
	return u.Name
}
