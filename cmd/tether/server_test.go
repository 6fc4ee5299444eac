package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/cli"
	"github.com/tetherhq/tether/transport/transporttest"
)

// Every flag the server refuses, on the command line or as its TETHER_* twin, is refused by
// parseServerConfig, which makes nothing on disk: the data dir it names, in a directory of its
// own, is not there afterwards, and that directory stays empty.
func TestParseServerConfigRefuses(t *testing.T) {
	certs := t.TempDir()
	good, expired, notYet := filepath.Join(certs, "good.pem"), filepath.Join(certs, "expired.pem"), filepath.Join(certs, "not-yet.pem")
	transporttest.WriteCert(t, good, good+".key", time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	transporttest.WriteCert(t, expired, expired+".key", time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	transporttest.WriteCert(t, notYet, notYet+".key", time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2101, 1, 1, 0, 0, 0, 0, time.UTC))
	aFile := filepath.Join(certs, "a-file")
	if err := os.WriteFile(aFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	const nats = "nats://127.0.0.1:4222/TETHER"
	const token = "0123456789abcdef0123456789abcdef"
	otel := []string{"--otel-endpoint", "http://127.0.0.1:4318"}
	for _, tc := range []struct {
		args  []string
		env   map[string]string
		want  string
		usage bool // exit 2 with the usage; else exit 1
	}{
		{args: []string{"--bogus"}, want: "flag provided but not defined: -bogus", usage: true},
		{args: []string{"--addr"}, want: "flag needs an argument: -addr", usage: true},
		{args: []string{"--max-conns", "many"}, want: "invalid value", usage: true},
		{env: map[string]string{"TETHER_MAX_DEAD": "lots"}, want: `TETHER_MAX_DEAD="lots"`, usage: true},
		{args: []string{"stray"}, want: `unexpected argument "stray": tether server takes flags only`, usage: true},
		{args: []string{"stray", "--auth", "token"}, want: `unexpected argument "stray"`, usage: true},
		{args: []string{"--addr", "127.0.0.1:0", "stray"}, want: `unexpected argument "stray"`, usage: true},
		{args: []string{"--log-level", "loud"}, want: "--log-level", usage: true},
		{args: []string{"--log-level", "verbose"}, want: "--log-level", usage: true},
		{env: map[string]string{"TETHER_LOG_LEVEL": "loud"}, want: "--log-level", usage: true},
		{args: []string{"--log-format", "xml"}, want: `--log-format "xml": want json, text or auto`, usage: true},
		{env: map[string]string{"TETHER_LOG_FORMAT": "xml"}, want: `--log-format "xml": want json, text or auto`, usage: true},
		{args: []string{"--procs", "-1"}, want: "--procs -1: want 0 (the default) to", usage: true},
		{args: []string{"--procs", "100000"}, want: "--procs 100000: want 0 (the default) to", usage: true},
		{args: []string{"--addr", "127.0.0.1:99999"}, want: `--addr "127.0.0.1:99999": want host:port, the port 0..65535`, usage: true},
		{args: []string{"--addr", "bogus"}, want: `--addr "bogus": want host:port`, usage: true},
		{args: []string{"--metrics-addr", "127.0.0.1:70000"}, want: `--metrics-addr "127.0.0.1:70000": want host:port`, usage: true},
		{args: []string{"--pprof-addr", "localhost"}, want: `--pprof-addr "localhost": want host:port`, usage: true},
		{args: []string{"--addr", "127.0.0.1:8080", "--metrics-addr", "127.0.0.1:8080"}, want: `--metrics-addr "127.0.0.1:8080" is --addr too`, usage: true},
		{args: []string{"--addr", "127.0.0.1:8080", "--pprof-addr", "127.0.0.1:8080"}, want: `--pprof-addr "127.0.0.1:8080" is --addr too`, usage: true},
		{args: []string{"--metrics-addr", "127.0.0.1:9090", "--pprof-addr", "127.0.0.1:9090"}, want: `--metrics-addr "127.0.0.1:9090" is --pprof-addr too`, usage: true},
		{args: []string{"--archive-dir", aFile}, want: "--archive-dir " + aFile + " is a file, not a directory", usage: true},
		{args: []string{"--auth", "token", "--admin-token", token, "--metrics-token", token}, want: "--metrics-token is the admin token", usage: true},
		{args: []string{"--auth", "token", "--addr", "0.0.0.0:0", "--insecure-http", "--tls-cert", good, "--tls-key", good + ".key"}, want: "--insecure-http serves plain HTTP, --tls-cert HTTPS", usage: true},
		{args: []string{"--leader-ttl", "5s"}, want: "--leader-ttl goes with --log nats://...", usage: true},
		{args: []string{"--nats-replicas", "1"}, want: "--nats-replicas goes with --log nats://...", usage: true},
		{args: []string{"--advertise", "https://a.example:8443"}, want: "--advertise goes with --log nats://...", usage: true},
		{env: map[string]string{"TETHER_LEADER_TTL": "5s"}, want: "--leader-ttl goes with --log nats://...", usage: true},
		{args: []string{"--log", nats, "--advertise", "notaurl"}, want: `--advertise "notaurl": want an http:// or https:// URL`, usage: true},
		{args: []string{"--log", nats, "--advertise", "http://"}, want: `--advertise "http://": want an http:// or https:// URL`, usage: true},
		{args: []string{"--auth", "tokens"}, want: `--auth "tokens": want none or token`, usage: true},
		{env: map[string]string{"TETHER_AUTH": "tokens"}, want: `--auth "tokens"`, usage: true},
		{args: []string{"--auth", "none", "--addr", "0.0.0.0:0"}, want: "--auth none serves loopback addresses only", usage: true},
		{args: []string{"--auth", "token", "--addr", "nowhere", "--insecure-http"}, want: `--addr "nowhere": want host:port`, usage: true},
		{args: []string{"--auth", "token", "--admin-token", "short"}, want: "--admin-token is 5 characters; it needs at least", usage: true},
		{env: map[string]string{"TETHER_ADMIN_TOKEN": "short"}, want: "--admin-token is 5 characters", usage: true},
		{args: []string{"--metrics-token", "short"}, want: "--metrics-token is 5 characters", usage: true},
		{args: []string{"--metrics-addr", "0.0.0.0:9090"}, want: `--metrics-addr "0.0.0.0:9090": /metrics without a credential`, usage: true},
		{args: []string{"--pprof-addr", "0.0.0.0:6060"}, want: `--pprof-addr "0.0.0.0:6060": profiles are served on loopback addresses only`, usage: true},
		{args: []string{"--max-conns", "0"}, want: "--max-conns 0: want 1 or more", usage: true},
		{args: []string{"--data", ""}, want: "--data is empty", usage: true},
		{env: map[string]string{"TETHER_DATA": ""}, want: "--data is empty", usage: true},
		{args: []string{"--tls-cert", "cert.pem"}, want: "--tls-cert and --tls-key go together", usage: true},
		{args: []string{"--tls-key", "key.pem"}, want: "--tls-cert and --tls-key go together", usage: true},
		{args: []string{"--tls-cert", "/nonexistent/cert.pem", "--tls-key", "/nonexistent/key.pem"}, want: "--tls-cert: open /nonexistent/cert.pem", usage: true},
		{args: []string{"--tls-cert", good, "--tls-key", expired + ".key"}, want: "--tls-cert and --tls-key", usage: true},
		{args: []string{"--tls-cert", expired, "--tls-key", expired + ".key"}, want: "--tls-cert " + expired + " expired at 2026-01-02T03:04:05Z", usage: true},
		{args: []string{"--tls-cert", notYet, "--tls-key", notYet + ".key"}, want: "--tls-cert " + notYet + " is not valid before 2100-01-01T00:00:00Z", usage: true},
		{args: []string{"--auth", "token", "--addr", "0.0.0.0:0"}, want: "would send API keys and tokens in clear text", usage: true},
		{args: []string{"--worker-token-ttl", "1s"}, want: "--worker-token-ttl 1s: want 10s..8760h0m0s", usage: true},
		{args: []string{"--worker-token-ttl", "9000h"}, want: "--worker-token-ttl 9000h0m0s", usage: true},
		{args: []string{"--retain", "-1h"}, want: "--retain -1h0m0s: want 0 (keep until deleted)", usage: true},
		{args: []string{"--retain-dead", "1ms"}, want: "--retain-dead 1ms: want 0 (keep until purged)", usage: true},
		{args: []string{"--archive-after", "1ms"}, want: "--archive-after 1ms: want 0 (never)", usage: true},
		{args: []string{"--archive-keep", "100000h"}, want: "--archive-keep 100000h0m0s: want 0 (for ever)", usage: true},
		{args: []string{"--archive-scrub-every", "1ms"}, want: "--archive-scrub-every 1ms: want 0 (never)", usage: true},
		{args: []string{"--archive-scrub-every", "-1h"}, want: "--archive-scrub-every -1h0m0s: want 0 (never)", usage: true},
		{env: map[string]string{"TETHER_ARCHIVE_SCRUB_RATE": "0"}, want: "--archive-scrub-rate 0: want 1..100000 (MiB a second)", usage: true},
		{args: []string{"--archive-scrub-rate", "-8"}, want: "--archive-scrub-rate -8: want 1..100000", usage: true},
		{args: []string{"--max-dead", "-1"}, want: "--max-dead -1: want 0 (no cap) or more", usage: true},
		{args: []string{"--flow-bytes-max", "0"}, want: "--flow-bytes-max 0: a flow file may hold at least 1 byte", usage: true},
		{args: []string{"--cluster-reconfigure"}, want: "--cluster-reconfigure goes with --log nats://...", usage: true},
		{args: []string{"--nats-creds", "x.creds"}, want: "the --nats-* flags go with --log nats://...", usage: true},
		{env: map[string]string{"TETHER_NATS_NKEY": "x.nk"}, want: "the --nats-* flags go with --log nats://...", usage: true},
		{args: []string{"--log", "http://example.com/S"}, want: "--log \"http://example.com/S\": want nats://host:port/STREAM", usage: true},
		{args: []string{"--log", nats, "--nats-tls-cert", "c.pem"}, want: "--nats-tls-cert and --nats-tls-key go together", usage: true},
		{args: []string{"--log", nats, "--nats-replicas", "7"}, want: "--nats-replicas 7: want 1..5", usage: true},
		{args: []string{"--log", nats, "--leader-ttl", "1ms"}, want: "--leader-ttl 1ms: want 500ms..1m0s", usage: true},
		{args: []string{"--log", nats, "--advertise", "example.com:8080"}, want: `--advertise "example.com:8080": want an http:// or https:// URL`, usage: true},
		// Tracing's variables, which the OpenTelemetry SDK would panic on, run out of memory
		// with, or take in silence (transport/tracing's TestReadSettingsRefuses has them all).
		{args: otel, env: map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "-1"}, want: `OTEL_BSP_MAX_QUEUE_SIZE="-1": want a whole number 1..65536`, usage: true},
		{args: otel, env: map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "9999999999"}, want: `OTEL_BSP_MAX_QUEUE_SIZE="9999999999"`, usage: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "-5"}, want: `OTEL_BSP_MAX_EXPORT_BATCH_SIZE="-5"`, usage: true},
		{args: otel, env: map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "0"}, want: `OTEL_BSP_SCHEDULE_DELAY="0": want a whole number 1..60000 (milliseconds)`, usage: true},
		{args: otel, env: map[string]string{"OTEL_TRACES_SAMPLER": "bogus"}, want: `OTEL_TRACES_SAMPLER="bogus": want always_on, always_off`, usage: true},
		{args: otel, env: map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "x"}, want: `OTEL_TRACES_SAMPLER_ARG="x": want the share of traces to keep, 0..1`, usage: true},
		{args: otel, env: map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "abc"}, want: "OTEL_EXPORTER_OTLP_HEADERS: entry 1 has no '='", usage: true},
		{args: otel, env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, want: `OTEL_EXPORTER_OTLP_PROTOCOL="http/json"`, usage: true},
		{args: otel, env: map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "team"}, want: "OTEL_RESOURCE_ATTRIBUTES: entry 1 is not key=value", usage: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, want: "OTEL_EXPORTER_OTLP_ENDPOINT", usage: true},
	} {
		name := strings.Join(tc.args, " ")
		for k, v := range tc.env {
			name += " " + k + "=" + v
		}
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			data := filepath.Join(root, "data")
			args := tc.args
			if _, twin := tc.env["TETHER_DATA"]; !twin {
				args = append([]string{"--data", data}, args...)
			}
			_, err := parseServerConfig(args, func(k string) (string, bool) {
				v, ok := tc.env[k]
				return v, ok
			})
			var ue *cli.UsageError
			switch {
			case err == nil:
				t.Fatalf("accepted; want %q", tc.want)
			case !strings.Contains(err.Error(), tc.want):
				t.Fatalf("err %q, want %q", err, tc.want)
			case errors.As(err, &ue) != tc.usage:
				t.Fatalf("err %q is a usage error (exit 2): %v, want %v", err, ue != nil, tc.usage)
			}
			if entries, err := os.ReadDir(root); err != nil || len(entries) != 0 {
				t.Fatalf("something was made on disk: %v %v", entries, err)
			}
		})
	}
}

// What the flags and their twins say is what serve gets; the command line beats the twin.
func TestParseServerConfigTakes(t *testing.T) {
	env := map[string]string{"TETHER_AUTH": "token", "TETHER_RETAIN": "1h", "TETHER_ADDR": "0.0.0.0:9"}
	c, err := parseServerConfig([]string{"--data", "d", "--addr", "127.0.0.1:0", "--max-dead", "0"}, func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.data != "d" || c.addr != "127.0.0.1:0" || c.auth != transport.AuthToken || c.retain != time.Hour || c.maxDead != 0 || c.retainDead != 7*24*time.Hour {
		t.Fatalf("%+v", c)
	}
}

// The admin-token file is made whole (mode 0600) and read back; one that is empty or short, a
// symbolic link, or readable by others is refused with how to fix it; one that --admin-token
// overrides is found stale.
func TestAdminTokenFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, adminTokenName)
	made, err := adminTokenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the file: %v %v", fi, err)
	}
	if again, err := adminTokenFile(path); err != nil || again != made {
		t.Fatalf("read back %q %v, want %q", again, err, made)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("left behind: %v", entries)
	}
	if !staleAdminTokenFile(path, "another-token-of-enough-characters") || staleAdminTokenFile(path, made) || staleAdminTokenFile(filepath.Join(dir, "none"), made) {
		t.Fatal("staleAdminTokenFile")
	}
	for _, tc := range []struct {
		name string
		make func(path string) error
		want string
	}{
		{"empty", func(p string) error { return os.WriteFile(p, nil, 0o600) }, "holds a token of 0 characters"},
		{"short", func(p string) error { return os.WriteFile(p, []byte("short\n"), 0o600) }, "delete the file for a new token"},
		{"world-readable", func(p string) error { return errors.Join(os.WriteFile(p, []byte(made), 0o600), os.Chmod(p, 0o644)) }, "chmod 600 " + filepath.Join(dir, "world-readable")},
		{"symlink", func(p string) error { return os.Symlink(path, p) }, "is a symbolic link"},
	} {
		p := filepath.Join(dir, tc.name)
		if err := tc.make(p); err != nil {
			t.Fatal(err)
		}
		if _, err := adminTokenFile(p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
