package checkpoint

import (
	"fmt"
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
