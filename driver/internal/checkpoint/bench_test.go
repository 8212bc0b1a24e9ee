package checkpoint

import (
	"fmt"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// BenchmarkDelete measures a durable removal from 8 goroutines per CPU,
// where the group commit shares folder fsyncs.
func BenchmarkDelete(b *testing.B) {
	s, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			uid := fmt.Sprintf("del-%p-%d", &i, i)
			if err := s.WriteIntent(sample(uid)); err != nil {
				b.Error(err)
				return
			}
			if err := s.Delete(types.UID(uid)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkRecordLifecycle measures one claim's records from prepare to
// unprepare, from 8 goroutines per CPU, as the driver writes them
// ("one file": Begin, Commit, MarkUnprepare, Delete) against whole-file
// writes ("replace": WriteIntent, Write, rename, Delete); compare the two
// in one run.
func BenchmarkRecordLifecycle(b *testing.B) {
	for _, mode := range []string{"one file", "replace"} {
		b.Run(mode, func(b *testing.B) {
			s, err := Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					if err := lifecycle(s, mode, types.UID(fmt.Sprintf("rec-%p-%d", &i, i))); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

func lifecycle(s *Store, mode string, uid types.UID) error {
	intent, done := sample(string(uid)), sample(string(uid))
	intent.State = StatePrepareStarted
	if mode == "one file" {
		p, err := s.Begin(intent)
		if err != nil {
			return err
		}
		if err := p.Commit(done); err != nil {
			return err
		}
		if err := s.MarkUnprepare(done); err != nil {
			return err
		}
	} else {
		if err := s.WriteIntent(intent); err != nil {
			return err
		}
		if err := s.Write(done); err != nil {
			return err
		}
		if err := os.Rename(s.path(uid), s.markPath(uid)); err != nil {
			return err
		}
	}
	return s.Delete(uid)
}
