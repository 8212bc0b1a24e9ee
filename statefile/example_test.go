package statefile_test

import (
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/drakit/drakit/statefile"
)

// A driver keeps a small JSON state file: it holds the lock while it
// reads, changes and replaces the file, and collects what a write
// interrupted by a crash left behind.
func Example() {
	dir, err := os.MkdirTemp("", "statefile-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "state.json")

	lock, err := statefile.Acquire(path + ".lock")
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release()
	if _, err := statefile.RemoveTemp(dir); err != nil {
		log.Fatal(err)
	}
	b, _ := json.Marshal(map[string][]string{"held": {"gpu-0"}})
	if err := statefile.WriteFile(path, b, statefile.Durable()); err != nil {
		log.Fatal(err)
	}
	out, _ := os.ReadFile(path)
	fmt.Println(string(out))
	// Output: {"held":["gpu-0"]}
}
