package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	for _, o := range []Options{{}, {SyncFile: true, SyncDir: true, Mode: 0o644, TempPattern: ".x-*.tmp"}} {
		dir := t.TempDir()
		path := filepath.Join(dir, "f")
		for _, content := range []string{"old", "new"} {
			if err := Write(path, []byte(content), o); err != nil {
				t.Fatalf("Write(%+v): %v", o, err)
			}
			got, err := os.ReadFile(path)
			if err != nil || string(got) != content {
				t.Fatalf("read back %q, %v; want %q", got, err, content)
			}
		}
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		want := o.Mode
		if want == 0 {
			want = 0o600
		}
		if st.Mode().Perm() != want {
			t.Errorf("mode %v, want %v", st.Mode().Perm(), want)
		}
		ents, _ := os.ReadDir(dir)
		if len(ents) != 1 {
			t.Errorf("folder holds %d entries, want only the file (no temporary file left)", len(ents))
		}
	}
}

func TestWriteErrorLeavesOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := Write(path, []byte("old"), Options{}); err != nil {
		t.Fatal(err)
	}
	if err := Write(filepath.Join(dir, "missing", "f"), []byte("x"), Options{}); err == nil {
		t.Fatal("Write into a missing folder succeeded")
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Errorf("file changed to %q", got)
	}
}
