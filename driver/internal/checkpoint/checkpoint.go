// Package checkpoint stores one crash-safe record per prepared claim.
//
// Each record lives in its own file named after the claim UID, so writing
// one costs the same whether 10 or 10,000 claims are held. Records are
// JSON inside a versioned envelope with a SHA-256 of the record bytes:
// unknown fields (written by a newer or older drakit) are ignored, a
// record that fails to parse or whose checksum does not match is moved to
// the quarantine folder and reported, never fatal.
//
// A prepare writes its claim's record file in two steps: [Store.Begin]
// creates it holding the intent, [Pending.Commit] appends the completed
// record and fsyncs. A file is one or more envelopes; the last complete
// one is the record (see [Decode]). Other writes ([Store.Write],
// [Store.WriteIntent]) replace the whole file through a temporary file
// and a rename.
//
// Durability contract (what each call guarantees when it returns):
//
//   - Process crash (kill -9, OOM kill): a record is never read torn. A
//     whole-file write is the old or the new record. Begin's file is
//     empty (removed by Load: the intent was not written, so the caller
//     had done nothing yet) or holds the intent. An append cut short
//     reads as the record before it. A rename or removal that returned
//     is visible to the next process.
//   - Power loss or kernel crash: [Pending.Commit] and [Store.Write]
//     fsync the record's content, so a completed record is never empty or
//     torn; the folder is not fsynced, so a record's new name (Write's
//     rename; Begin's create, on a file system whose fsync of a file does
//     not also commit the file's name, as ext4's and XFS's do) reaches the
//     disk with the next journal commit (ext4: within 5 s), and the previous state
//     (an intent, which recovery undoes, or no record) may come back
//     instead. Begin, [Store.WriteIntent] and [Store.MarkUnprepare] wait
//     for nothing: their loss goes with the loss of the device state they
//     guard. [Store.Delete] waits until the removal is on disk (one folder
//     fsync, shared by the removals that run at the same time), so an
//     unprepared claim never comes back.
//
// Recovery (the driver's, at start) undoes every record that is not
// Prepared; the vendor's unprepare must therefore be idempotent and accept
// a device it never prepared.
package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drakit/drakit/statefile"
)

// Version is the envelope version this code writes. Readers accept any
// version: fields are only ever added, so a record from another version is
// read with the fields this code knows.
const Version = 1

// Kind marks a file as a drakit checkpoint record.
const Kind = "drakit.dev/ClaimCheckpoint"

const (
	recordSuffix = ".json"
	// unprepareSuffix names a record renamed by MarkUnprepare.
	unprepareSuffix = ".unprepare"
	tmpPrefix       = ".tmp-"
	quarantineDir   = "quarantine"
	// releasedSuffix marks a quarantined record whose claim was dealt
	// with (see Store.Release).
	releasedSuffix = ".released"
)

// State is where a claim is in its two-phase prepare or unprepare.
type State string

const (
	// StatePrepareStarted records the intent to prepare: vendor work may
	// have been done in part. Recovery undoes it.
	StatePrepareStarted State = "PrepareStarted"
	// StatePrepared records a completed prepare; the result is final.
	StatePrepared State = "Prepared"
	// StateUnprepareStarted records the intent to unprepare. Recovery
	// finishes it.
	StateUnprepareStarted State = "UnprepareStarted"
)

// Record is everything the driver must know about one claim to answer a
// repeated prepare and to unprepare it after a restart, without the API
// server.
type Record struct {
	ClaimUID  types.UID `json:"claimUID"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	State     State     `json:"state"`
	Devices   []Device  `json:"devices,omitempty"`
	// CDISpec is the claim's CDI spec as the prepare wrote it (the
	// completed record's only), written again when the file is lost
	// while the claim is prepared; empty in records written before it
	// was kept.
	CDISpec json.RawMessage `json:"cdiSpec,omitempty"`
	// Updated is when the record was last written.
	Updated time.Time `json:"updated"`
}

// Device is one allocated device of a claim, as allocated and as prepared.
type Device struct {
	// Request is the allocation's request name, with the subrequest
	// ("req/sub") when there is one.
	Request     string     `json:"request"`
	Pool        string     `json:"pool"`
	Device      string     `json:"device"`
	ShareID     *types.UID `json:"shareID,omitempty"`
	AdminAccess bool       `json:"adminAccess,omitempty"`
	// ConsumedCapacity is what a share took of the device's consumable
	// capacities, as allocated; nil for an unshared device and in records
	// written before it was kept (issue 49), which load as they were.
	ConsumedCapacity Capacity `json:"consumedCapacity,omitempty"`
	// Fields "shared" and "prepared" of records written before issue 18
	// were never read and are ignored: whether a device may be shared is
	// AdminAccess or ShareID, and whether a device was prepared is the
	// record's State (an intent's devices are undone whether or not their
	// prepare ran, so the vendor's unprepare must accept both).
	CDIDeviceIDs []string `json:"cdiDeviceIDs,omitempty"`
	// CDIName is the device's name in the claim's CDI spec, "" if the
	// device has no edits.
	CDIName string `json:"cdiName,omitempty"`
	// Data is the vendor's state from its prepare.
	Data json.RawMessage `json:"data,omitempty"`
	// Metadata is the device metadata from the vendor's prepare, as JSON
	// (kubeletplugin.DeviceMetadata).
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// Capacity is a share's consumed capacity by capacity name.
type Capacity = map[resourceapi.QualifiedName]resource.Quantity

type envelope struct {
	Kind    string          `json:"kind"`
	Version int             `json:"version"`
	SHA256  string          `json:"sha256"`
	Record  json.RawMessage `json:"record"`
}

// errEmpty is read's error for an empty record file: one that Begin
// created and a crash stopped before the intent was in it (or, after a
// power loss, an intent whose content was lost). Nothing was done for the
// claim that the file would let anyone undo; the file is removed.
var errEmpty = errors.New("empty checkpoint record file")

// ErrCorrupt is wrapped by the error of a record that could not be read.
var ErrCorrupt = errors.New("corrupt checkpoint record")

// Corrupt describes a record that Load moved out of the way.
type Corrupt struct {
	// File is the record's original path.
	File string
	// QuarantinedTo is where it was moved ("" if the move failed).
	QuarantinedTo string
	// Claims are the claims that Lost returns because of this record:
	// the claim the file is named after, and for a record stored under
	// another claim's name (a misplaced file), also the claim the record
	// itself names. Empty when the move failed.
	Claims []types.UID
	// Err says what was wrong; it wraps ErrCorrupt.
	Err error
}

// Store is a folder of records. Its methods are safe for concurrent use on
// distinct claims; the caller serializes writes of one claim. No method
// keeps or changes a record it is given.
type Store struct {
	dir     string
	noFsync bool
	// dirSync makes removals durable, one folder fsync for all the
	// removals that are waiting when it starts (group commit).
	dirSync groupSync
	// OnUnlinked, when set, is called by Delete after the record is
	// unlinked and before Delete waits for the folder fsync that makes
	// the removal durable (a crash point for tests).
	OnUnlinked func(uid types.UID)
	// OnCreated, when set, is called by Begin after the record file is
	// created, before the intent is written into it; OnAppended by
	// Pending.Commit after the completed record is written, before the
	// fsync (crash points for tests).
	OnCreated, OnAppended func(uid types.UID)
}

// Open creates dir if needed and returns the store in it.
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("open checkpoint: empty folder path")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open checkpoint: %w", err)
	}
	s := &Store{dir: dir}
	s.dirSync.sync = func() error { return statefile.SyncFolder(dir) }
	return s, nil
}

// Dir is the store's folder.
func (s *Store) Dir() string { return s.dir }

func (s *Store) path(uid types.UID) string {
	return filepath.Join(s.dir, string(uid)+recordSuffix)
}

func (s *Store) markPath(uid types.UID) string {
	return filepath.Join(s.dir, string(uid)+unprepareSuffix)
}

// misplacedError is the error of a record file that holds another
// claim's record.
type misplacedError struct{ holds types.UID }

func (e *misplacedError) Error() string {
	return fmt.Sprintf("%v: holds claim %s", ErrCorrupt, e.holds)
}
func (e *misplacedError) Unwrap() error { return ErrCorrupt }

// validUID rejects UIDs that could escape the folder.
func validUID(uid types.UID) error {
	u := string(uid)
	if u == "" {
		return errors.New("empty claim UID")
	}
	if strings.ContainsAny(u, `/\`) || u == "." || u == ".." || strings.HasPrefix(u, ".") {
		return fmt.Errorf("claim UID %q is not a valid file name", u)
	}
	return nil
}

// Encode returns the file content for r.
func Encode(r *Record) ([]byte, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode checkpoint record: %w", err)
	}
	sum := sha256.Sum256(body)
	return json.Marshal(envelope{Kind: Kind, Version: Version, SHA256: hex.EncodeToString(sum[:]), Record: body})
}

// Decode parses a record file: one or more envelopes written by Encode
// of any version, one after the other (a file started by [Store.Begin]
// holds the intent and, once committed, the completed record after it).
// The last envelope wins. A last envelope cut short (the file ends inside
// it: an append interrupted by a crash, which never returned to its
// caller) is ignored when an earlier one is complete; anything else that
// is not a valid envelope, and envelopes of different claims, make the
// file corrupt. Unknown fields are ignored. Errors wrap ErrCorrupt.
func Decode(data []byte) (*Record, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var last *Record
	for {
		var env envelope
		err := dec.Decode(&env)
		if err == io.EOF && last != nil {
			return last, nil
		}
		if errors.Is(err, io.ErrUnexpectedEOF) && last != nil {
			return last, nil // torn append
		}
		if err != nil {
			return nil, fmt.Errorf("%w: parse envelope: %v", ErrCorrupt, err)
		}
		r, err := decodeEnvelope(&env)
		if err != nil {
			return nil, err
		}
		if last != nil && r.ClaimUID != last.ClaimUID {
			return nil, fmt.Errorf("%w: records of claims %s and %s in one file", ErrCorrupt, last.ClaimUID, r.ClaimUID)
		}
		last = r
	}
}

func decodeEnvelope(env *envelope) (*Record, error) {
	if env.Kind != Kind {
		return nil, fmt.Errorf("%w: kind %q, want %q", ErrCorrupt, env.Kind, Kind)
	}
	if len(env.Record) == 0 {
		return nil, fmt.Errorf("%w: no record", ErrCorrupt)
	}
	sum := sha256.Sum256(env.Record)
	if hex.EncodeToString(sum[:]) != env.SHA256 {
		return nil, fmt.Errorf("%w: sha256 mismatch", ErrCorrupt)
	}
	var r Record
	if err := json.Unmarshal(env.Record, &r); err != nil {
		return nil, fmt.Errorf("%w: parse record: %v", ErrCorrupt, err)
	}
	if err := validUID(r.ClaimUID); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	switch r.State {
	case StatePrepareStarted, StatePrepared, StateUnprepareStarted:
	default:
		return nil, fmt.Errorf("%w: unknown state %q", ErrCorrupt, r.State)
	}
	return &r, nil
}

// Write stores r atomically with its content fsynced before the rename:
// after a process crash the record is the old or the new one; after a
// power loss it is the old one or the complete new one, never a torn
// file. The rename itself reaches the disk with the file system's next
// journal commit (the folder is not fsynced): a caller whose previous
// record is a safe state to recover from (an intent) needs no more.
// The stored record's Updated is the time of the write; r itself is not
// changed.
func (s *Store) Write(r *Record) error { return s.write(r, true) }

// WriteIntent stores r atomically but without waiting for the disk: after
// a process crash the record is the old or the new one; after a power loss
// it may be the old one. Use it for intent records, whose loss on power
// loss is harmless because the device state they guard is lost too.
func (s *Store) WriteIntent(r *Record) error { return s.write(r, false) }

func (s *Store) write(r *Record, durable bool) error {
	if err := validUID(r.ClaimUID); err != nil {
		return fmt.Errorf("write checkpoint record: %w", err)
	}
	stamped := *r
	stamped.Updated = time.Now().UTC().Truncate(time.Millisecond)
	data, err := Encode(&stamped)
	if err != nil {
		return err
	}
	if err := s.writeFile(s.path(r.ClaimUID), data, durable && !s.noFsync); err != nil {
		return fmt.Errorf("write checkpoint record %s: %w", r.ClaimUID, err)
	}
	return nil
}

// Begin starts the record of a claim that has none: it creates the
// record file holding r as the intent, without waiting for the disk (as
// [Store.WriteIntent]), and keeps it open so that [Pending.Commit] can
// append the completed record to the same file. One new file per
// prepare, and no temporary file or rename: a rename or create in the
// folder holds the folder's lock, which every concurrent prepare and
// unprepare contends for.
//
// Why no temporary file is needed: the file is created empty, then filled
// with one write, all before the caller's device work starts. After a
// process crash the file is empty (the write never ran: Load removes the
// file, there is nothing to undo) or holds the intent; after a power loss
// it may also be gone or empty, like any intent (see the package doc).
// If r's record file exists (left by a failed undo's fallback),
// Begin replaces it atomically with the intent first.
func (s *Store) Begin(r *Record) (*Pending, error) {
	if err := validUID(r.ClaimUID); err != nil {
		return nil, fmt.Errorf("begin checkpoint record: %w", err)
	}
	stamped := *r
	stamped.Updated = time.Now().UTC().Truncate(time.Millisecond)
	data, err := Encode(&stamped)
	if err != nil {
		return nil, err
	}
	data = append(data, '\n')
	name := s.path(r.ClaimUID)
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if errors.Is(err, os.ErrExist) {
		if err := s.writeFile(name, data, false); err != nil {
			return nil, fmt.Errorf("begin checkpoint record %s: %w", r.ClaimUID, err)
		}
		f, err = os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0o600)
	} else if err == nil {
		if s.OnCreated != nil {
			s.OnCreated(r.ClaimUID)
		}
		if _, err = f.Write(data); err != nil {
			_ = f.Close()
			_ = syscall.Unlink(name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("begin checkpoint record %s: %w", r.ClaimUID, err)
	}
	return &Pending{s: s, uid: r.ClaimUID, f: f, intent: data}, nil
}

// Pending is a record file started by [Store.Begin], open until Commit or
// Close.
type Pending struct {
	s      *Store
	uid    types.UID
	f      *os.File
	intent []byte // the file's content as Begin left it
}

// Commit appends r, the claim's completed record, to the file and fsyncs
// it: once Commit returns, r survives a power loss. The append is not
// atomic, and need not be: a crash before it is complete leaves the
// intent followed by a cut-short record, which Decode reads as the intent
// (recovery undoes it, which is right: Commit had not returned). On error
// the file is cut back to the intent, so that it never says more than the
// caller was told. Commit closes the file, whatever it returns.
func (p *Pending) Commit(r *Record) (err error) {
	if p.f == nil {
		return fmt.Errorf("commit checkpoint record %s: already closed", p.uid)
	}
	defer p.Close()
	defer func() {
		if err != nil {
			err = fmt.Errorf("commit checkpoint record %s: %w", p.uid, err)
			if terr := p.f.Truncate(int64(len(p.intent))); terr != nil {
				if werr := p.s.writeFile(p.s.path(p.uid), p.intent, false); werr != nil {
					err = fmt.Errorf("%w (and could not restore the intent: %v, %v)", err, terr, werr)
				}
			}
		}
	}()
	if r.ClaimUID != p.uid {
		return fmt.Errorf("record of claim %s", r.ClaimUID)
	}
	stamped := *r
	stamped.Updated = time.Now().UTC().Truncate(time.Millisecond)
	data, err := Encode(&stamped)
	if err != nil {
		return err
	}
	if _, err := p.f.Write(append(data, '\n')); err != nil {
		return err
	}
	if s := p.s; s.OnAppended != nil {
		s.OnAppended(p.uid)
	}
	if p.s.noFsync {
		return nil
	}
	return p.f.Sync()
}

// Close closes the file without committing; it does nothing after Commit
// or an earlier Close. The record stays the intent.
func (p *Pending) Close() error {
	if p.f == nil {
		return nil
	}
	err := p.f.Close()
	p.f = nil
	return err
}

func (s *Store) writeFile(name string, data []byte, durable bool) error {
	opts := []statefile.WriteOption{statefile.WithTempPattern(fmt.Sprintf("%s%d-*", tmpPrefix, os.Getpid()))}
	if durable {
		opts = append(opts, statefile.SyncFile())
	}
	return statefile.WriteFile(name, data, opts...)
}

func (s *Store) syncDir() error {
	if s.noFsync {
		return nil
	}
	return s.dirSync.wait()
}

// MarkUnprepare records the intent to unprepare r's claim, whose record
// is stored: it appends r in StateUnprepareStarted to the record file,
// which holds no folder lock (unlike a create or rename, which contend
// with every other claim's) and, as the file's last block has room for
// it as a rule, needs no new space. When the append fails (a full disk),
// the record file is renamed instead, which needs no space at all: Load
// and Get return a renamed record in StateUnprepareStarted. Like
// WriteIntent it does not wait for the disk, and an append cut short by a
// crash reads as the record before it (Prepared: the kubelet retries the
// unprepare). Delete removes the renamed record too.
func (s *Store) MarkUnprepare(r *Record) error {
	uid := r.ClaimUID
	if err := validUID(uid); err != nil {
		return fmt.Errorf("mark checkpoint record: %w", err)
	}
	aerr := s.appendIntent(r)
	if aerr == nil {
		return nil
	}
	if err := os.Rename(s.path(uid), s.markPath(uid)); err != nil {
		return fmt.Errorf("mark checkpoint record %s for unprepare: %w", uid, errors.Join(aerr, err))
	}
	return nil
}

// appendIntent appends r as an unprepare intent to its record file; on
// error the file is cut back to what it held, so that nothing is ever
// appended after a cut-short record.
func (s *Store) appendIntent(r *Record) error {
	stamped := *r
	stamped.State = StateUnprepareStarted
	stamped.Updated = time.Now().UTC().Truncate(time.Millisecond)
	data, err := Encode(&stamped)
	if err != nil {
		return err
	}
	// No O_CREATE: the record must be there.
	f, err := os.OpenFile(s.path(r.ClaimUID), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err == nil {
		if _, err = f.Write(append(data, '\n')); err != nil {
			if terr := f.Truncate(st.Size()); terr != nil {
				err = errors.Join(err, terr)
			}
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Delete removes the record of uid durably: it returns once the removal
// is on disk (the folder is fsynced; removals that run at the same time
// share one fsync). A missing record is not an error.
func (s *Store) Delete(uid types.UID) error {
	if err := validUID(uid); err != nil {
		return fmt.Errorf("delete checkpoint record: %w", err)
	}
	// Unlink, not os.Remove, which tries rmdir after a missing file. The
	// renamed record only when there is no other (MarkUnprepare renames
	// on a full disk only; even a failed unlink takes the folder's lock):
	// a hand-made twin left behind is an unprepare intent, which the next
	// start finishes.
	err := syscall.Unlink(s.path(uid))
	if errors.Is(err, syscall.ENOENT) {
		err = syscall.Unlink(s.markPath(uid))
		if errors.Is(err, syscall.ENOENT) {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("delete checkpoint record %s: %w", uid, err)
	}
	if s.OnUnlinked != nil {
		s.OnUnlinked(uid)
	}
	if err := s.syncDir(); err != nil {
		return fmt.Errorf("delete checkpoint record %s: %w", uid, err)
	}
	return nil
}

// groupSync runs sync for many waiters at once (group commit): a waiter
// returns after a run of sync that started after it called wait, so that
// run covers everything the waiter did before; the waiters that arrive
// while a run is in progress share the next one.
type groupSync struct {
	sync func() error

	mu      sync.Mutex
	cond    *sync.Cond
	running bool
	// next is the run that waiters arriving now join (nil: none yet).
	next *syncRun
}

type syncRun struct {
	finished bool
	err      error
}

func (g *groupSync) wait() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cond == nil {
		g.cond = sync.NewCond(&g.mu)
	}
	if g.next == nil {
		g.next = &syncRun{}
	}
	run := g.next
	for g.running && !run.finished {
		g.cond.Wait()
	}
	if run.finished {
		return run.err
	}
	// Lead the run: every waiter that joined it did so before this
	// point, so the sync below covers their changes.
	g.next = nil
	g.running = true
	g.mu.Unlock()
	err := g.sync()
	g.mu.Lock()
	run.finished, run.err = true, err
	g.running = false
	g.cond.Broadcast()
	return err
}

// Get reads the record of uid, from the file MarkUnprepare renamed it to
// (in StateUnprepareStarted) when there is no other; (nil, nil) when
// there is none. A corrupt record returns an error wrapping ErrCorrupt and
// is left in place; so does a record stored under another claim's name.
func (s *Store) Get(uid types.UID) (*Record, error) {
	if err := validUID(uid); err != nil {
		return nil, fmt.Errorf("read checkpoint record: %w", err)
	}
	r, err := s.read(s.path(uid), uid)
	if err == errEmpty {
		return nil, nil // being begun, or left by a crash: no record
	}
	if r != nil || err != nil {
		return r, err
	}
	r, err = s.read(s.markPath(uid), uid)
	if err == errEmpty {
		return nil, nil
	}
	if r != nil {
		r.State = StateUnprepareStarted
	}
	return r, err
}

// read reads the record of uid from file; (nil, nil) when there is no
// file.
func (s *Store) read(file string, uid types.UID) (*Record, error) {
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint record %s: %w", uid, err)
	}
	if len(data) == 0 {
		return nil, errEmpty
	}
	r, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("read checkpoint record %s: %w", uid, err)
	}
	if r.ClaimUID != uid {
		return nil, fmt.Errorf("read checkpoint record %s: %w", uid, &misplacedError{holds: r.ClaimUID})
	}
	return r, nil
}

// Load reads every record. Leftover temporary files from an interrupted
// write are removed. A corrupt record is moved into the quarantine folder
// and returned in corrupt; it does not fail Load. The error is only for a
// folder that cannot be read.
func (s *Store) Load() (records []*Record, corrupt []Corrupt, err error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, nil, fmt.Errorf("load checkpoint: %w", err)
	}
	seen := map[types.UID]bool{}
	for _, e := range entries {
		name := e.Name()
		full := filepath.Join(s.dir, name)
		var uid types.UID
		marked := false
		switch {
		case e.IsDir():
			continue
		case strings.HasPrefix(name, tmpPrefix):
			_ = os.Remove(full)
			continue
		case strings.HasSuffix(name, recordSuffix):
			uid = types.UID(strings.TrimSuffix(name, recordSuffix))
		case strings.HasSuffix(name, unprepareSuffix):
			uid, marked = types.UID(strings.TrimSuffix(name, unprepareSuffix)), true
		default:
			continue
		}
		r, rerr := s.read(full, uid)
		if rerr == errEmpty {
			_ = syscall.Unlink(full)
			continue
		}
		if rerr == nil && r == nil {
			continue // removed meanwhile
		}
		if rerr != nil {
			c := Corrupt{File: full, Err: rerr}
			if errors.Is(rerr, ErrCorrupt) || validUID(uid) != nil {
				if to, qerr := s.quarantine(full, uid); qerr == nil {
					c.QuarantinedTo = to
					c.Claims = s.lostClaims(to, uid, rerr)
				}
			}
			corrupt = append(corrupt, c)
			continue
		}
		if marked {
			r.State = StateUnprepareStarted
		}
		// A record and its renamed twin (a crash between the two is
		// impossible, a hand-made copy is not): the unprepare intent
		// wins, undoing is always safe.
		if seen[uid] {
			for i, old := range records {
				if old.ClaimUID == uid && marked {
					records[i] = r
				}
			}
			continue
		}
		seen[uid] = true
		records = append(records, r)
	}
	return records, corrupt, nil
}

// lostClaims returns the claims a quarantined file at to makes lost: the
// one its name says and, for a misplaced record, the one it holds, whose
// own record is then missing. The latter gets a hard link in the
// quarantine folder (no space needed) so that Lost and Release see it
// under its own name.
func (s *Store) lostClaims(to string, uid types.UID, err error) []types.UID {
	var out []types.UID
	if _, ok := quarantinedUID(filepath.Base(to)); ok {
		out = append(out, uid)
	}
	var mp *misplacedError
	if !errors.As(err, &mp) || mp.holds == uid || validUID(mp.holds) != nil {
		return out
	}
	alias := filepath.Join(s.dir, quarantineDir, fmt.Sprintf("%s%s.%d", mp.holds, recordSuffix, time.Now().UnixNano()))
	if os.Link(to, alias) == nil {
		out = append(out, mp.holds)
	}
	return out
}

// quarantine moves the record file full of claim uid into the quarantine
// folder, as "<uid>.json.<n>" (whichever name it had) when uid is valid.
func (s *Store) quarantine(full string, uid types.UID) (string, error) {
	qdir := filepath.Join(s.dir, quarantineDir)
	if err := os.MkdirAll(qdir, 0o700); err != nil {
		return "", err
	}
	base := filepath.Base(full)
	if validUID(uid) == nil {
		base = string(uid) + recordSuffix
	}
	to := filepath.Join(qdir, fmt.Sprintf("%s.%d", base, time.Now().UnixNano()))
	if err := os.Rename(full, to); err != nil {
		return "", err
	}
	return to, s.syncDir()
}

// Quarantined lists the files in the quarantine folder.
func (s *Store) Quarantined() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(s.dir, quarantineDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list quarantined checkpoint records: %w", err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, filepath.Join(s.dir, quarantineDir, e.Name()))
	}
	return out, nil
}

// Lost returns the claims whose records are in the quarantine folder and
// not released (see Release), each once: what the driver prepared for them
// is not known from the checkpoint any more.
func (s *Store) Lost() ([]types.UID, error) {
	files, err := s.Quarantined()
	if err != nil {
		return nil, err
	}
	seen := map[types.UID]bool{}
	var out []types.UID
	for _, f := range files {
		uid, ok := quarantinedUID(filepath.Base(f))
		if ok && !seen[uid] {
			seen[uid] = true
			out = append(out, uid)
		}
	}
	return out, nil
}

// quarantinedUID reads "<uid>.json.<n>", the name quarantine gives a
// record file; released files and other names give false.
func quarantinedUID(name string) (types.UID, bool) {
	if strings.HasSuffix(name, releasedSuffix) {
		return "", false
	}
	i := strings.LastIndex(name, recordSuffix+".")
	if i <= 0 {
		return "", false
	}
	uid := types.UID(name[:i])
	if validUID(uid) != nil {
		return "", false
	}
	return uid, true
}

// Release marks the quarantined records of a claim as dealt with: they
// stay in the quarantine folder, for the admin, with the suffix
// ".released", and Lost no longer returns the claim. Releasing a claim
// with nothing quarantined does nothing.
func (s *Store) Release(uid types.UID) error {
	files, err := s.Quarantined()
	if err != nil {
		return fmt.Errorf("release quarantined record of %s: %w", uid, err)
	}
	changed := false
	for _, f := range files {
		if got, ok := quarantinedUID(filepath.Base(f)); ok && got == uid {
			if err := os.Rename(f, f+releasedSuffix); err != nil {
				return fmt.Errorf("release quarantined record of %s: %w", uid, err)
			}
			changed = true
		}
	}
	if !changed || s.noFsync {
		return nil
	}
	if err := statefile.SyncFolder(filepath.Join(s.dir, quarantineDir)); err != nil {
		return fmt.Errorf("release quarantined record of %s: %w", uid, err)
	}
	return nil
}

// Equal reports whether two records hold the same claim state, ignoring
// the write time.
func Equal(a, b *Record) bool {
	x, y := *a, *b
	x.Updated, y.Updated = time.Time{}, time.Time{}
	bx, _ := json.Marshal(x)
	by, _ := json.Marshal(y)
	return bytes.Equal(bx, by)
}
