package floor

import (
	"net"
	"net/http"
	"path/filepath"
	"testing"
)

// The instrument must count what it claims: three durable records per job (submit, lease,
// completion), every completion acked, and CPU on both sides.
func TestFloorRunsTheShape(t *testing.T) {
	for _, fsync := range []bool{true, false} {
		l, err := openGroupLog(filepath.Join(t.TempDir(), "records"), fsync)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: handler(l)}
		go srv.Serve(ln)

		const jobs = 300
		res, err := generate(ln.Addr().String(), Shape{Jobs: jobs, Producers: 4, Workers: 3})
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		if res.Records != 3*jobs {
			t.Errorf("fsync=%v: %d records for %d jobs, want %d", fsync, res.Records, jobs, 3*jobs)
		}
		if res.Syncs < 1 || res.Syncs > res.Records || res.JobsPerSecond <= 0 || res.GeneratorCPU <= 0 {
			t.Errorf("fsync=%v: implausible result %+v", fsync, res)
		}
	}
}

func TestFloorRefusesAnEmptyShape(t *testing.T) {
	if _, err := generate("127.0.0.1:1", Shape{Jobs: 0, Producers: 1, Workers: 1}); err == nil {
		t.Fatal("a run of no jobs was accepted")
	}
}
