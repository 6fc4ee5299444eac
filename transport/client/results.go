package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tetherhq/tether/transport/wire"
)

// resultStore keeps each result a worker has not yet seen the server take, one file per lease,
// so that a worker that stops (or dies) before the server answers sends it again when it starts.
// A file is written, synced and renamed into place before its result is first sent, and removed
// once the server took it or refused it for good.
type resultStore struct{ dir string }

// pendingResult is a result on disk: the frame as sent, and what says how long its lease may
// still be valid.
type pendingResult struct {
	Frame    wire.Frame    `json:"frame"`
	LeaseTTL time.Duration `json:"lease_ttl"`
	Heard    time.Time     `json:"heard"` // when the server last confirmed the lease
}

const resultSuffix = ".result.json"

func (s resultStore) path(lease string) string {
	// A lease id is a ULID; anything else is made safe for a file name.
	safe := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, lease)
	return filepath.Join(s.dir, safe+resultSuffix)
}

// save writes p durably before its result is sent.
func (s resultStore) save(p pendingResult) error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	path := s.path(p.Frame.LeaseID)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	d, err := os.Open(s.dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// remove forgets the result of lease.
func (s resultStore) remove(lease string) error { return removeKept(s.path(lease)) }

// removeKept removes a file of the store, if it is there.
func removeKept(path string) error {
	err := os.Remove(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// load returns the results a worker left unsent.
func (s resultStore) load() ([]pendingResult, []error) {
	return readKept(s.dir, resultSuffix, func(data []byte) (p pendingResult, err error) {
		if err = json.Unmarshal(data, &p); err == nil {
			err = namesALease(p.Frame.JobID, p.Frame.LeaseID)
		}
		return p, err
	})
}

// namesALease refuses a kept file that names no job or lease.
func namesALease(job, lease string) error {
	if job == "" || lease == "" {
		return errors.New("no job or lease in it")
	}
	return nil
}

// readKept reads each file of dir named *suffix: a file a write left unfinished (suffix.tmp) is
// removed, never read; one that cannot be read or decoded is reported and left where it is, for
// an operator to look at.
func readKept[T any](dir, suffix string, decode func([]byte) (T, error)) ([]T, []error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, []error{err}
	}
	var out []T
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if strings.HasSuffix(name, suffix+".tmp") {
			_ = os.Remove(filepath.Join(dir, name))
			continue
		}
		if !strings.HasSuffix(name, suffix) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		var v T
		if err == nil {
			v, err = decode(data)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		out = append(out, v)
	}
	return out, errs
}
