package statefile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// Document is a JSON document on disk that several processes share.
// Every access holds an advisory lock on Path+".lock" (shared to read,
// exclusive to change), and every change is a read-modify-write replaced
// with [WriteFile], so a reader never sees half a document and a process
// killed mid-write leaves the old one. The lock lives in its own file
// because the rename that replaces the document replaces its inode.
//
// The zero Path is not valid; a Document is a value and may be copied.
type Document struct {
	// Path is the document's file.
	Path string
	// Volatile leaves out the fsyncs: a change survives a killed process
	// (the rename is atomic) but not a power loss. For state that a
	// reboot resets anyway, such as a model of hardware.
	Volatile bool
}

// DecodeError is a document that exists but does not decode: a torn or
// hand-edited file. Its owner should wrap it with what the document is
// and what an operator should do.
type DecodeError struct {
	// Path is the document's file.
	Path string
	// Err is the decoder's error.
	Err error
}

// Error says which file does not decode and why.
func (e *DecodeError) Error() string { return fmt.Sprintf("decode %s: %v", e.Path, e.Err) }

// Unwrap returns the decoder's error.
func (e *DecodeError) Unwrap() error { return e.Err }

// Read decodes the document into v under a shared lock. A missing file
// leaves v as it is and reports false; a file that does not decode is a
// [*DecodeError].
func (d Document) Read(v any) (bool, error) {
	l, err := Acquire(d.Path+".lock", Shared())
	if err != nil {
		return false, err
	}
	defer func() { _ = l.Release() }()
	return d.load(v)
}

// Update decodes the document into v under an exclusive lock, runs fn
// with whether the file existed, and writes v back when fn reports a
// change, also when fn fails: a call may fail and still change state.
// fn's error is returned, joined with a write error if there is one. v
// must be a pointer whose value, before the call, is the empty document.
func (d Document) Update(v any, fn func(exists bool) (changed bool, err error)) error {
	l, err := Acquire(d.Path + ".lock")
	if err != nil {
		return err
	}
	defer func() { _ = l.Release() }()
	exists, err := d.load(v)
	if err != nil {
		return err
	}
	changed, ferr := fn(exists)
	if !changed {
		return ferr
	}
	if err := d.write(v); err != nil {
		return errors.Join(ferr, err)
	}
	return ferr
}

func (d Document) write(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", d.Path, err)
	}
	var opts []WriteOption
	if !d.Volatile {
		opts = append(opts, Durable())
	}
	return WriteFile(d.Path, append(b, '\n'), opts...)
}

func (d Document) load(v any) (bool, error) {
	b, err := os.ReadFile(d.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", d.Path, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, &DecodeError{Path: d.Path, Err: err}
	}
	return true, nil
}
