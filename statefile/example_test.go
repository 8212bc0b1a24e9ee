package statefile_test

import (
	"encoding/json"
	"errors"
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

// The pods of a driver's DaemonSet take a folder's instance lock as the
// instances of its rolling update: a second release of the driver on the
// node is refused, the new pod of the update gets in beside the old one,
// and a third process is refused.
func ExampleLockInstance() {
	dir, err := os.MkdirTemp("", "instance-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	lock := func(owner string) *statefile.InstanceLock {
		l, err := statefile.LockInstance(dir, "drakit",
			statefile.As("gpu.example.com", owner), statefile.RollingUpdate())
		var inUse *statefile.InUseError
		if errors.As(err, &inUse) {
			var holders []string
			for _, h := range inUse.Holders {
				holders = append(holders, h.Owner)
			}
			fmt.Println(owner, "refused, the folder is held by", holders)
			return nil
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(owner, "admitted")
		return l
	}
	old := lock("gpus/nvidia")
	defer old.Release()
	lock("other/nvidia")
	surge := lock("gpus/nvidia")
	defer surge.Release()
	lock("gpus/nvidia")
	// Output:
	// gpus/nvidia admitted
	// other/nvidia refused, the folder is held by [gpus/nvidia]
	// gpus/nvidia admitted
	// gpus/nvidia refused, the folder is held by [gpus/nvidia gpus/nvidia]
}
