package wire_test

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/transport/wire"
)

var update = flag.Bool("update", false, "rewrite docs/errors.md and the Python SDK's table of codes from the table")

// Every code the behaviours can refuse with (a constant of type actors.Code, wherever in the
// package it is declared) is in the table, so none reaches a client with a made-up status.
func TestEveryActorsCodeIsInTheTable(t *testing.T) {
	const dir = "../../actors"
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	found := 0
	for _, e := range entries {
		if name := e.Name(); strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			f, err := parser.ParseFile(fset, dir+"/"+name, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				spec, ok := n.(*ast.ValueSpec)
				if !ok {
					return true
				}
				if id, ok := spec.Type.(*ast.Ident); !ok || id.Name != "Code" {
					return true
				}
				for i, v := range spec.Values {
					lit, ok := v.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Errorf("%s: actors code %s is not a string literal", fset.Position(v.Pos()), spec.Names[i])
						continue
					}
					code, _ := strconv.Unquote(lit.Value)
					found++
					if _, ok := wire.LookupCode(code); !ok {
						t.Errorf("%s: actors code %s (%q) is not in wire.ErrorCodes", fset.Position(v.Pos()), spec.Names[i], code)
					}
				}
				return true
			})
		}
	}
	if found < 15 {
		t.Fatalf("found %d actors codes; the scan no longer sees their declarations", found)
	}
}

func TestTheTableIsWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range wire.ErrorCodes {
		switch {
		case seen[c.Code]:
			t.Errorf("%s is in the table twice", c.Code)
		case c.Code != strings.ToUpper(c.Code) || strings.ContainsAny(c.Code, " -"):
			t.Errorf("%s is not UPPER_SNAKE_CASE", c.Code)
		case c.Status < 400 || c.Status > 599 || http.StatusText(c.Status) == "":
			t.Errorf("%s: status %d", c.Code, c.Status)
		case c.Close != wire.CloseWorkerRevoked && c.Close != 1007 && c.Close != 1008 && c.Close != 1013:
			t.Errorf("%s: close code %d", c.Code, c.Close)
		case !strings.HasSuffix(c.Meaning, "."):
			t.Errorf("%s: its meaning is not a sentence: %q", c.Code, c.Meaning)
		case c.Retry != (c.Status >= 500 || c.Code == "TOKEN_RENEWED_RECENTLY"):
			// Only the server's own trouble, and a limit that frees with time, pass with time.
			t.Errorf("%s: retry %v with status %d", c.Code, c.Retry, c.Status)
		}
		seen[c.Code] = true
	}
	if got := wire.StatusOf("NO_SUCH_CODE"); got != http.StatusInternalServerError {
		t.Errorf("an unknown code is %d", got)
	}
}

// docs/errors.md begins with the table; `go test ./transport/wire -run ErrorsDoc -update`
// rewrites it, and keeps the sections written by hand that follow it (the command line's codes).
func TestErrorsDocIsTheTable(t *testing.T) {
	var b bytes.Buffer
	b.WriteString("# Error codes\n\n")
	b.WriteString("Every error answer is `{\"error\":{\"code\",\"message\",\"details\",\"request_id\"}}` with the\n")
	b.WriteString("status below. *Retry* says whether the same request may succeed later unchanged (with backoff);\n")
	b.WriteString("any other refusal must be fixed, not repeated. A worker's WebSocket session that ends for one\n")
	b.WriteString("of these reasons closes with the close code given. This file is generated from\n")
	b.WriteString("`wire.ErrorCodes` (transport/wire/codes.go), which the server, the close codes and\n")
	b.WriteString("`GET /v1/openapi.json` (`x-error-codes`) read too.\n\n")
	b.WriteString("| code | status | retry | close | meaning |\n|---|---|---|---|---|\n")
	for _, c := range wire.ErrorCodes {
		retry := "no"
		if c.Retry {
			retry = "yes"
		}
		fmt.Fprintf(&b, "| `%s` | %d %s | %s | %d | %s |\n", c.Code, c.Status, http.StatusText(c.Status), retry, c.Close, c.Meaning)
	}
	// The sections after the table, each under a heading of its own.
	handWritten := func(doc []byte) []byte {
		if i := bytes.Index(doc, []byte("\n\n## ")); i >= 0 {
			return doc[i+2:]
		}
		return nil
	}
	checkGenerated(t, "../../docs/errors.md", "ErrorsDoc", b.Bytes(), handWritten)
}

// The Python SDK (sdk/python) decides what to send again from the same table, kept in
// tether/_codes.py, with the release reasons that are the server's own (a worker's Release
// refuses them); `go test ./transport/wire -run PythonCodes -update` rewrites it.
func TestPythonCodesAreTheTable(t *testing.T) {
	var b bytes.Buffer
	b.WriteString("\"\"\"The server's error codes: (HTTP status, whether the same request may pass later).\n\n")
	b.WriteString("Generated from wire.ErrorCodes (transport/wire/codes.go) and eventlog.ServerReleaseReasons by\n")
	b.WriteString("`go test ./transport/wire -run PythonCodes -update`; a test fails when it differs.\n\"\"\"\n\n")
	b.WriteString("CODES = {\n")
	for _, c := range wire.ErrorCodes {
		retry := "False"
		if c.Retry {
			retry = "True"
		}
		fmt.Fprintf(&b, "    %q: (%d, %s),\n", c.Code, c.Status, retry)
	}
	b.WriteString("}\n\n#: The release reasons that are the server's own, which no worker may give.\nSERVER_RELEASE_REASONS = (")
	for i, r := range eventlog.ServerReleaseReasons() {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", r)
	}
	b.WriteString(")\n")
	checkGenerated(t, "../../sdk/python/tether/_codes.py", "PythonCodes", b.Bytes(), nil)
}

// checkGenerated checks that the file at path begins with want (and holds nothing else but what
// handWritten, if set, finds after it), and with -update writes it so, keeping that rest.
func checkGenerated(t *testing.T, path, test string, want []byte, handWritten func([]byte) []byte) {
	t.Helper()
	rest := func(doc []byte) []byte {
		if handWritten == nil {
			return nil
		}
		return handWritten(doc)
	}
	if *update {
		old, _ := os.ReadFile(path)
		doc := bytes.Clone(want)
		if r := rest(old); r != nil {
			doc = append(append(doc, '\n'), r...)
		}
		if err := os.WriteFile(path, doc, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if r := rest(got); r != nil {
		got = got[:len(got)-len(r)-1]
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not generated from the table; run go test ./transport/wire -run %s -update", path, test)
	}
}
