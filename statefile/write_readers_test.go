package statefile_test

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/drakit/drakit/statefile"
)

// TestWriteFileReadersSeeWholeFiles: a reader that opens the file while
// WriteFile replaces it, again and again, sees the old content or the
// new one, never a torn file (run it with -race). A plain os.WriteFile in
// place fails it: readers see the file truncated or half written.
func TestWriteFileReadersSeeWholeFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	contents := [][]byte{bytes.Repeat([]byte("a"), 1<<20), bytes.Repeat([]byte("b"), 1<<19)}
	if err := statefile.WriteFile(path, contents[0]); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(done)
		for i := range 200 {
			if err := statefile.WriteFile(path, contents[i%2]); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				got, err := os.ReadFile(path)
				if err != nil {
					t.Errorf("read during the writes: %v", err)
					return
				}
				if !bytes.Equal(got, contents[0]) && !bytes.Equal(got, contents[1]) {
					t.Errorf("read a torn file of %d bytes", len(got))
					return
				}
			}
		})
	}
	wg.Wait()
}
