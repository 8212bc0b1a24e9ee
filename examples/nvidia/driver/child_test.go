package driver

import (
	"encoding/json"
	"os"
	"os/exec"
	"testing"
)

// childCommand is the command that runs this test binary's helper test
// (a TestXxxHelperProcess) as a child process, with job in its
// environment variable env as JSON (read back by childJob).
func childCommand(t *testing.T, helper, env string, job any) *exec.Cmd {
	t.Helper()
	raw, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+helper+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"="+string(raw))
	return cmd
}

// childJob is the job childCommand gave a helper test; it skips the test
// (with parent saying who runs it) when it runs other than as a child.
func childJob[T any](t *testing.T, env, parent string) T {
	t.Helper()
	raw := os.Getenv(env)
	if raw == "" {
		t.Skip("runs only as the child of " + parent)
	}
	var job T
	if err := json.Unmarshal([]byte(raw), &job); err != nil {
		t.Fatal(err)
	}
	return job
}
