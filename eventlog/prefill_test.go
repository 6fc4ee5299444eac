package eventlog

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestPrefillKeepsWritesAndZerosAhead writes records of random sizes through a prefilled file
// with fills small enough that the writer keeps catching up with them, and checks that the
// file holds exactly what was written, followed by zeros only, and that zeros were written
// ahead of the writer.
func TestPrefillKeepsWritesAndZerosAhead(t *testing.T) {
	t.Parallel()
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for _, chunk := range []int64{1 << 10, 16 << 10, 1 << 20} {
		t.Run(fmt.Sprintf("chunk=%d", chunk), func(t *testing.T) {
			fs := prefillFS{FS: vfs.NewMem(), chunk: chunk}
			f, err := fs.Create("000001.log", vfs.WriteCategoryUnspecified)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := f.(*prefillFile); !ok {
				t.Fatalf("a WAL was not prefilled: %T", f)
			}
			var want bytes.Buffer
			for range 2000 {
				b := make([]byte, 1+rng.IntN(700))
				for i := range b {
					b[i] = byte(1 + rng.IntN(255)) // never zero, so a zero over data shows
				}
				if _, err := f.Write(b); err != nil {
					t.Fatal(err)
				}
				want.Write(b)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			got := readAll(t, fs, "000001.log")
			if len(got) <= want.Len() {
				t.Fatalf("file holds %d bytes after %d written: nothing was filled ahead", len(got), want.Len())
			}
			if !bytes.Equal(got[:want.Len()], want.Bytes()) {
				t.Fatalf("the written bytes were not kept (first difference at %d)", firstDiff(got, want.Bytes()))
			}
			if i := bytes.IndexFunc(got[want.Len():], func(r rune) bool { return r != 0 }); i >= 0 {
				t.Fatalf("byte %d past the written data is not zero", want.Len()+i)
			}
		})
	}
}

// TestPrefillOnlyWALs checks that only WALs are prefilled, and that a recycled WAL is filled
// from its old size on, not over the bytes the writer is about to overwrite.
func TestPrefillOnlyWALs(t *testing.T) {
	t.Parallel()
	mem := vfs.NewMem()
	fs := prefillFS{FS: mem, chunk: 4 << 10}
	f, err := fs.Create("MANIFEST-000001", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.(*prefillFile); ok {
		t.Fatal("a MANIFEST was prefilled")
	}
	_ = f.Close()

	old := bytes.Repeat([]byte{7}, 10<<10)
	w, err := mem.Create("000001.log", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(bytes.Clone(old)); err != nil { // Write may scribble on its argument
		t.Fatal(err)
	}
	_ = w.Close()
	r, err := fs.ReuseForWrite("000001.log", "000002.log", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Write([]byte("new")); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, mem, "000002.log")
	if !bytes.Equal(got[:3], []byte("new")) || !bytes.Equal(got[3:len(old)], old[3:]) {
		t.Fatal("a recycled WAL's bytes ahead of the writer were changed")
	}
}

func readAll(t *testing.T, fs vfs.FS, name string) []byte {
	t.Helper()
	f, err := fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// Open prefills the WALs when asked: after a few appends the WAL holds more than they wrote
// (the zeros ahead), and without WALPrefill it holds exactly what Pebble wrote. The default is
// on for the OS filesystem only.
func TestOpenPrefillsTheWAL(t *testing.T) {
	t.Parallel()
	walSize := func(prefill int64) int64 {
		fs := vfs.NewMem()
		l, err := Open("/log", Options{FS: fs, WALPrefill: prefill})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			if _, err := l.Append(context.Background(), Event{Stream: "job/a", Type: "t", Data: []byte(fmt.Sprint(i))}); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Close(); err != nil { // waits for a fill under way
			t.Fatal(err)
		}
		names, err := fs.List("/log")
		if err != nil {
			t.Fatal(err)
		}
		var size int64
		for _, n := range names {
			if isWAL(n) {
				st, err := fs.Stat("/log/" + n)
				if err != nil {
					t.Fatal(err)
				}
				size = max(size, st.Size())
			}
		}
		return size
	}
	if off, on := walSize(-1), walSize(64<<10); off >= 64<<10 || on < 64<<10 {
		t.Fatalf("largest WAL %d bytes without prefill, %d with a 64 KiB prefill", off, on)
	}

	def := Options{}
	def.setDefaults()
	mem := Options{FS: vfs.NewMem()}
	mem.setDefaults()
	if def.WALPrefill != 2<<20 || mem.WALPrefill != 0 {
		t.Fatalf("default WALPrefill %d on the OS filesystem, %d on another", def.WALPrefill, mem.WALPrefill)
	}
}
