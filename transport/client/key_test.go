package client_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetherhq/tether/transport/client"
)

// A key written is read back whole; a second write to the same file is refused, not a key
// replaced; a file that is not a key says so.
func TestKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "worker.key")
	pub, err := client.WriteNewKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%v %v, want mode 0600", fi, err)
	}
	key, err := client.ReadKey(path)
	if err != nil || !pub.Equal(key.Public()) {
		t.Fatalf("read back %v, %v", key, err)
	}
	if _, err := client.WriteNewKey(path); !os.IsExist(err) {
		t.Fatalf("a second key over the first: %v", err)
	}
	other := filepath.Join(t.TempDir(), "notes")
	if err := os.WriteFile(other, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := client.ReadKey(other); err == nil || !strings.Contains(err.Error(), "not a PEM private key") {
		t.Fatalf("a file that is no key: %v", err)
	}
}
