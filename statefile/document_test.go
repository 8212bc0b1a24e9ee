package statefile_test

import (
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/drakit/drakit/statefile"
)

type counters struct {
	Claims map[string]int `json:"claims,omitempty"`
}

func TestDocument(t *testing.T) {
	doc := statefile.Document{Path: filepath.Join(t.TempDir(), "state.json")}

	var c counters
	if ok, err := doc.Read(&c); ok || err != nil {
		t.Fatalf("Read of a missing document = %v, %v; want false, nil", ok, err)
	}

	// No change: nothing is written.
	if err := doc.Update(&c, func(exists bool) (bool, error) { return false, nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(doc.Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an Update without a change wrote the document: %v", err)
	}

	// A change that also fails is written, and the error comes back.
	boom := errors.New("boom")
	c = counters{}
	err := doc.Update(&c, func(exists bool) (bool, error) {
		if exists {
			t.Error("exists = true before the first write")
		}
		c.Claims = map[string]int{"a": 1}
		return true, boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update = %v; want fn's error", err)
	}
	var back counters
	if ok, err := doc.Read(&back); !ok || err != nil || back.Claims["a"] != 1 {
		t.Fatalf("Read after a failed change = %v, %v, %+v; want the change kept", ok, err, back)
	}

	// A torn file is a DecodeError naming the file.
	if err := os.WriteFile(doc.Path, []byte(`{"claims": {"a":`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = doc.Read(&back)
	var de *statefile.DecodeError
	if !errors.As(err, &de) || de.Path != doc.Path {
		t.Fatalf("Read of a torn document = %v; want a *DecodeError for %s", err, doc.Path)
	}
	ran := false
	if err := doc.Update(&counters{}, func(bool) (bool, error) { ran = true; return true, nil }); !errors.As(err, &de) || ran {
		t.Fatalf("Update of a torn document = %v (fn ran: %v); want a *DecodeError and fn not run", err, ran)
	}
}

// Two processes (here two Documents on one path) count claims in one
// file; each change is a locked read-modify-write.
func ExampleDocument() {
	dir, err := os.MkdirTemp("", "statefile-document")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "claims.json")

	for _, claim := range []string{"a", "b", "a"} {
		doc := statefile.Document{Path: path}
		var c counters
		err := doc.Update(&c, func(bool) (bool, error) {
			if c.Claims == nil {
				c.Claims = map[string]int{}
			}
			c.Claims[claim]++
			return true, nil
		})
		if err != nil {
			log.Fatal(err)
		}
	}
	var c counters
	if _, err := (statefile.Document{Path: path}).Read(&c); err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.Claims)
	// Output: map[a:2 b:1]
}

// TestDocumentUpdatesAtOnce: changes of one document from many writers
// at once (goroutines here, each with its own Document and so its own
// lock descriptor, as processes have) are read-modify-writes in turn: no
// change is lost, and a reader at the same time never sees half a
// document. Run it with -race.
func TestDocumentUpdatesAtOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "claims.json")
	const writers, changes = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers+1)
	for w := range writers {
		wg.Go(func() {
			doc := statefile.Document{Path: path, Volatile: true}
			for range changes {
				var c counters
				err := doc.Update(&c, func(bool) (bool, error) {
					if c.Claims == nil {
						c.Claims = map[string]int{}
					}
					c.Claims["all"]++
					c.Claims[fmt.Sprint("w", w)]++
					return true, nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	done, reader := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(reader)
		doc := statefile.Document{Path: path}
		for {
			select {
			case <-done:
				return
			default:
			}
			var c counters
			if _, err := doc.Read(&c); err != nil {
				errs <- fmt.Errorf("read during the changes: %w", err)
				return
			}
			sum := 0
			for k, n := range c.Claims {
				if k != "all" {
					sum += n
				}
			}
			if sum != c.Claims["all"] {
				errs <- fmt.Errorf("read a document whose counts disagree: %v", c.Claims)
				return
			}
		}
	}()
	wg.Wait()
	close(done)
	<-reader
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var c counters
	if _, err := (statefile.Document{Path: path}).Read(&c); err != nil {
		t.Fatal(err)
	}
	for w := range writers {
		if got := c.Claims[fmt.Sprint("w", w)]; got != changes {
			t.Errorf("writer %d: %d changes kept, want %d", w, got, changes)
		}
	}
}
