package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/types"
)

func sample(uid string) *Record {
	share := types.UID("share-1")
	return &Record{
		ClaimUID: types.UID(uid), Namespace: "ns", Name: "claim-" + uid, State: StatePrepared,
		Devices: []Device{{Request: "gpu/small", Pool: "node-a", Device: "gpu-0", ShareID: &share,
			CDIDeviceIDs: []string{"example.com/gpu=" + uid + "-gpu-0"}, Data: json.RawMessage(`{"k":1}`)}},
	}
}

var ignoreTime = cmpopts.IgnoreFields(Record{}, "Updated")

func TestWriteGetDelete(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	want := sample("u1")
	if err := s.Write(want); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get("u1")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got, ignoreTime); d != "" {
		t.Errorf("record after round trip (-want +got):\n%s", d)
	}
	if err := s.Delete("u1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("u1"); err != nil {
		t.Errorf("second delete: %v, want nil", err)
	}
	if got, err := s.Get("u1"); got != nil || err != nil {
		t.Errorf("Get after delete = %v, %v; want nil, nil", got, err)
	}
}

func TestInvalidUID(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{"", "../x", "a/b", ".hidden"} {
		r := sample("x")
		r.ClaimUID = types.UID(uid)
		if err := s.Write(r); err == nil {
			t.Errorf("Write with UID %q succeeded, want error", uid)
		}
	}
}

// envelopeWith builds a record file by hand, as another drakit version
// might have written it.
func envelopeWith(t *testing.T, version int, record string, extraEnvelope string) []byte {
	t.Helper()
	sum := sha256.Sum256([]byte(record))
	return []byte(fmt.Sprintf(`{"kind":%q,"version":%d,"sha256":%q,"record":%s%s}`, Kind, version, hex.EncodeToString(sum[:]), record, extraEnvelope))
}

// concat joins a record file's parts.
func concat(first []byte, rest ...[]byte) []byte {
	out := slices.Clone(first)
	for _, r := range rest {
		out = append(out, r...)
	}
	return out
}

// lostInOrder is what Corrupt.Claims says for a file and the claim its
// misplaced record holds.
func lostInOrder(file string, holds types.UID) []types.UID {
	out := []types.UID{types.UID(strings.TrimSuffix(file, ".json"))}
	if holds != "" {
		out = append(out, holds)
	}
	return out
}

// TestBeginCommit: Begin publishes the intent, Commit the completed
// record, in one file; a failed Commit leaves the intent; Begin over a
// leftover record file starts from the intent.
func TestBeginCommit(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	intent := sample("a")
	intent.State = StatePrepareStarted
	done := sample("a")
	get := func(want *Record) {
		t.Helper()
		got, err := s.Get("a")
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if d := cmp.Diff(want, got, ignoreTime); d != "" {
			t.Errorf("record (-want +got):\n%s", d)
		}
		recs, corrupt, err := s.Load()
		if err != nil || len(corrupt) != 0 {
			t.Fatalf("Load: %v, corrupt %v", err, corrupt)
		}
		if d := cmp.Diff([]*Record{want}, recs, ignoreTime); d != "" {
			t.Errorf("loaded (-want +got):\n%s", d)
		}
	}

	p, err := s.Begin(intent)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	get(intent)
	if err := p.Commit(done); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	get(done)
	if err := p.Commit(done); err == nil {
		t.Errorf("second Commit succeeded")
	}

	// A failed Commit (here: another claim's record) leaves the intent.
	if err := s.Delete("a"); err != nil {
		t.Fatal(err)
	}
	if p, err = s.Begin(intent); err != nil {
		t.Fatalf("Begin: %v", err)
	}
	if err := p.Commit(sample("b")); err == nil {
		t.Errorf("Commit of another claim's record succeeded")
	}
	get(intent)

	// Begin over a leftover file (completed here) starts from the intent.
	if err := s.Write(done); err != nil {
		t.Fatal(err)
	}
	if p, err = s.Begin(intent); err != nil {
		t.Fatalf("Begin over a record: %v", err)
	}
	get(intent)
	if err := p.Commit(done); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	get(done)

	// An empty file (Begin killed before the intent) is no record.
	for _, name := range []string{s.path("empty"), s.markPath("empty")} {
		if err := os.WriteFile(name, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if r, err := s.Get("empty"); r != nil || err != nil {
			t.Errorf("Get of an empty %s = %v, %v; want nil, nil", filepath.Base(name), r, err)
		}
		if err := os.Remove(name); err != nil {
			t.Fatal(err)
		}
	}

	// The unprepare intent is appended to the same file.
	if err := s.MarkUnprepare(done); err != nil {
		t.Fatalf("MarkUnprepare: %v", err)
	}
	marked := sample("a")
	marked.State = StateUnprepareStarted
	get(marked)
	if _, err := os.Stat(s.markPath("a")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record renamed although the append could be done: %v", err)
	}
	if err := s.Delete("a"); err != nil {
		t.Fatal(err)
	}
	if recs, _, err := s.Load(); err != nil || len(recs) != 0 {
		t.Errorf("Load after Delete = %v, %v", recs, err)
	}
}

func TestLoadTolerantAndQuarantine(t *testing.T) {
	good := sample("good")
	goodBytes, err := Encode(good)
	if err != nil {
		t.Fatal(err)
	}
	goodAsIntent := sample("good")
	goodAsIntent.State = StatePrepareStarted
	goodIntent, err := Encode(goodAsIntent)
	if err != nil {
		t.Fatal(err)
	}
	nl := []byte("\n")
	goodIntent = append(goodIntent, nl...)
	otherBytes, err := Encode(sample("other"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		file        string
		content     []byte
		wantRecord  *Record
		wantCorrupt bool
		alsoLost    types.UID
	}{
		{name: "current", file: "good.json", content: goodBytes, wantRecord: good},
		{
			name: "newer version with unknown fields", file: "newer.json",
			content:    envelopeWith(t, 7, `{"claimUID":"newer","namespace":"ns","name":"c","state":"Prepared","futureField":{"a":1},"devices":[{"request":"r","pool":"p","device":"d","futureDeviceField":true}]}`, `,"compression":"none"`),
			wantRecord: &Record{ClaimUID: "newer", Namespace: "ns", Name: "c", State: StatePrepared, Devices: []Device{{Request: "r", Pool: "p", Device: "d"}}},
		},
		{
			name: "older version without optional fields", file: "older.json",
			content:    envelopeWith(t, 0, `{"claimUID":"older","state":"PrepareStarted"}`, ""),
			wantRecord: &Record{ClaimUID: "older", State: StatePrepareStarted},
		},
		{name: "truncated", file: "trunc.json", content: goodBytes[:len(goodBytes)/2], wantCorrupt: true},
		{name: "garbage", file: "garbage.json", content: []byte("\x00\x01not json"), wantCorrupt: true},
		// Created by Begin, killed before the intent was written: nothing
		// to undo, the file goes.
		{name: "empty", file: "empty.json", content: nil},
		// Begin's intent and Commit's completed record after it.
		{name: "intent then completed", file: "good.json", content: concat(goodIntent, goodBytes, nl), wantRecord: good},
		// Killed during Commit's append: the intent holds.
		{name: "intent then torn completion", file: "good.json", content: concat(goodIntent, goodBytes[:len(goodBytes)-9]), wantRecord: goodAsIntent},
		{name: "intent then torn completion at a line end", file: "good.json", content: concat(goodIntent, goodBytes[:1]), wantRecord: goodAsIntent},
		// Not a cut-short append: corrupt, never read as the intent.
		{name: "intent then garbage", file: "good.json", content: concat(goodIntent, []byte("\x00\x00\x00\x00")), wantCorrupt: true},
		{name: "intent then checksum mismatch", file: "good.json", content: concat(goodIntent, bytes.Replace(goodBytes, []byte(`"gpu-0"`), []byte(`"gpu-9"`), 1), nl), wantCorrupt: true},
		{name: "intent then another claim", file: "good.json", content: concat(goodIntent, otherBytes, nl), wantCorrupt: true},
		{name: "checksum mismatch", file: "flip.json", content: []byte(fmt.Sprintf(`{"kind":%q,"version":1,"sha256":"00","record":{"claimUID":"flip","state":"Prepared"}}`, Kind)), wantCorrupt: true},
		{name: "unknown state", file: "state.json", content: envelopeWith(t, 1, `{"claimUID":"state","state":"Exploded"}`, ""), wantCorrupt: true},
		// Misplaced: the file's claim and the record's claim are both
		// lost (the record's own file is missing).
		{name: "uid does not match file", file: "other.json", content: goodBytes, wantCorrupt: true, alsoLost: "good"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, tc.file), tc.content, 0o600); err != nil {
				t.Fatal(err)
			}
			// A leftover temporary file of an interrupted write.
			if err := os.WriteFile(filepath.Join(dir, tmpPrefix+"1-1"), []byte("partial"), 0o600); err != nil {
				t.Fatal(err)
			}
			records, corrupt, err := s.Load()
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if tc.wantCorrupt {
				if len(records) != 0 || len(corrupt) != 1 {
					t.Fatalf("Load = %d records, %d corrupt; want 0, 1", len(records), len(corrupt))
				}
				if !errors.Is(corrupt[0].Err, ErrCorrupt) {
					t.Errorf("corrupt error %v does not wrap ErrCorrupt", corrupt[0].Err)
				}
				if corrupt[0].QuarantinedTo == "" {
					t.Errorf("corrupt record was not quarantined")
				}
				if _, err := os.Stat(filepath.Join(dir, tc.file)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("corrupt record still in place: %v", err)
				}
				wantLost := []types.UID{types.UID(strings.TrimSuffix(tc.file, ".json"))}
				if tc.alsoLost != "" {
					wantLost = append(wantLost, tc.alsoLost)
				}
				q, _ := s.Quarantined()
				if len(q) != len(wantLost) {
					t.Errorf("quarantine holds %d files, want %d", len(q), len(wantLost))
				}
				lost, err := s.Lost()
				slices.Sort(lost)
				slices.Sort(wantLost)
				if err != nil || !slices.Equal(lost, wantLost) {
					t.Errorf("Lost = %v, %v; want %v", lost, err, wantLost)
				}
				if !slices.Equal(corrupt[0].Claims, lostInOrder(tc.file, tc.alsoLost)) {
					t.Errorf("Corrupt.Claims = %v, want %v", corrupt[0].Claims, lostInOrder(tc.file, tc.alsoLost))
				}
				// A second load is clean: no crash loop.
				records, corrupt, err = s.Load()
				if err != nil || len(records) != 0 || len(corrupt) != 0 {
					t.Errorf("second Load = %d, %d, %v; want 0, 0, nil", len(records), len(corrupt), err)
				}
			} else {
				if len(corrupt) != 0 {
					t.Fatalf("Load reported corrupt records: %+v", corrupt)
				}
				var want []*Record
				if tc.wantRecord != nil {
					want = []*Record{tc.wantRecord}
				} else if _, err := os.Stat(filepath.Join(dir, tc.file)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("empty record file still in place: %v", err)
				}
				if d := cmp.Diff(want, records, ignoreTime); d != "" {
					t.Errorf("records (-want +got):\n%s", d)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, tmpPrefix+"1-1")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("temporary file not removed by Load")
			}
		})
	}
}

// BenchmarkWrite measures one record write with few and many records held;
// the cost must not grow with the number held (compare the two results).
func BenchmarkWrite(b *testing.B) {
	for _, held := range []int{10, 10000} {
		b.Run(fmt.Sprintf("held=%d", held), func(b *testing.B) {
			s, err := Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			s.noFsync = true // fill fast
			for i := range held {
				if err := s.Write(sample(fmt.Sprintf("held-%d", i))); err != nil {
					b.Fatal(err)
				}
			}
			s.noFsync = false
			syscall.Sync() // do not measure the fill's writeback
			r := sample("bench")
			b.ResetTimer()
			for b.Loop() {
				if err := s.Write(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestLostAndRelease(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Two corrupt generations of one claim, one of another, and a file
	// whose name is no claim UID.
	for i, name := range []string{"a.json", "b.json", "a.json"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, corrupt, err := s.Load(); err != nil || len(corrupt) != 1 {
			t.Fatalf("load %d: %v %v", i, corrupt, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, quarantineDir, "notes.txt"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	lost, err := s.Lost()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(lost)
	if diff := cmp.Diff([]types.UID{"a", "b"}, lost); diff != "" {
		t.Errorf("Lost (-want +got):\n%s", diff)
	}
	if err := s.Release("a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Release("never-quarantined"); err != nil {
		t.Errorf("Release of a claim with nothing quarantined: %v", err)
	}
	if lost, err = s.Lost(); err != nil || len(lost) != 1 || lost[0] != "b" {
		t.Errorf("Lost after Release(a) = %v, %v; want [b]", lost, err)
	}
	q, _ := s.Quarantined()
	released := 0
	for _, f := range q {
		if strings.HasSuffix(f, releasedSuffix) {
			released++
		}
	}
	if len(q) != 4 || released != 2 {
		t.Errorf("quarantine folder = %v; want the 3 records kept (2 released) and notes.txt", q)
	}
}

func TestWriteLeavesItsArgumentAlone(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := sample("u1")
	before := *r
	if err := s.Write(r); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteIntent(r); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(&before, r); d != "" {
		t.Errorf("Write changed its argument (-before +after):\n%s", d)
	}
	got, err := s.Get("u1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Updated.IsZero() {
		t.Error("stored record has no write time")
	}
}

// TestGroupSync checks the group commit of folder fsyncs: every waiter
// returns only after a sync that started after it called wait, and
// waiters that arrive together share syncs.
func TestGroupSync(t *testing.T) {
	var mu sync.Mutex
	var starts []int // the change counter seen by each sync at its start
	changes := 0
	g := &groupSync{sync: func() error {
		mu.Lock()
		starts = append(starts, changes)
		mu.Unlock()
		time.Sleep(2 * time.Millisecond) // a disk's flush
		return nil
	}}
	const waiters = 64
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	for range waiters {
		wg.Go(func() {
			mu.Lock()
			changes++
			mine := changes
			n := len(starts)
			mu.Unlock()
			if err := g.wait(); err != nil {
				errs <- err
				return
			}
			// Some sync that started after this waiter's change must
			// have run: one of the syncs from index n on saw it.
			mu.Lock()
			defer mu.Unlock()
			for _, seen := range starts[n:] {
				if seen >= mine {
					return
				}
			}
			errs <- fmt.Errorf("waiter %d returned before a sync covered its change (syncs saw %v)", mine, starts)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(starts) >= waiters {
		t.Errorf("%d syncs for %d concurrent waiters, want them shared", len(starts), waiters)
	}
	// An error reaches every waiter of its run.
	boom := errors.New("disk gone")
	g = &groupSync{sync: func() error { return boom }}
	if err := g.wait(); !errors.Is(err, boom) {
		t.Errorf("wait = %v, want %v", err, boom)
	}
}
