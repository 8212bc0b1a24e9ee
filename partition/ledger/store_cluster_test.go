package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/drakit/drakit/partition"
	"github.com/drakit/drakit/partition/ledger"
	"github.com/drakit/drakit/partition/plan"
	"github.com/drakit/drakit/testenv"
)

// TestStoreOnAPIServer runs Store.Update on a real API server from many
// writers at once (go test -race): four "webhook replicas" (a Store
// each, so a cache each) admit 40 claims that all want one of the node's
// open devices, while two "agents" republish the node's layout for a
// changing demand. Every admission either moves an open device to Held
// or is refused; no device is held by two claims; the ledger stays valid
// (Check); a Watch of the node's ledger by name sees the last version.
func TestStoreOnAPIServer(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns = "ledgers"
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := h100(t)
	schemes := func(string) (*partition.Scheme, error) { return s, nil }
	cards := []ledger.AgentCard{{Index: 0, Scheme: s}, {Index: 1, Scheme: s}}
	store := func(t *testing.T) *ledger.Store {
		st, err := ledger.NewStore(
			kubernetes.NewForConfigOrDie(env.RESTConfig),
			ns,
			"gpu.example.com",
		)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	seed := store(t)
	if _, err := seed.Update(ctx, "n1", true, func(l *ledger.Ledger) error {
		l.Seeded, l.Demand = true, plan.Demand{"1g.10gb": 14}
		_, err := l.Publish("n1/layout", cards)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	watched := make(chan *ledger.Ledger, 1000)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	synced := make(chan struct{})
	go func() {
		_ = store(t).Watch(wctx, "n1", func(_ string, l *ledger.Ledger) { watched <- l }, synced)
	}()
	<-synced

	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := map[types.UID]ledger.Device{}
	for r := 0; r < 4; r++ {
		st := store(t)
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			for k := r; k < 40; k += 4 {
				claim := ledger.ClaimRef{
					UID:       types.UID("uid-" + strconv.Itoa(k)),
					Namespace: "ns",
					Name:      fmt.Sprint("c", k),
				}
				for attempt := 0; attempt < 20; attempt++ {
					cur, _ := st.Cached("n1")
					if cur == nil || len(cur.Open) == 0 {
						time.Sleep(10 * time.Millisecond)
						if cur, _, _ = st.Get(ctx, "n1"); cur == nil || len(cur.Open) == 0 {
							continue
						}
					}
					d := cur.Open[k%len(cur.Open)]
					_, err := st.Update(ctx, "n1", false, func(l *ledger.Ledger) error {
						return l.Admit(claim, "7", []ledger.Device{d})
					})
					var notOpen *ledger.NotOpenError
					if errors.As(err, &notOpen) {
						continue // taken meanwhile: the scheduler tries again
					}
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					admitted[claim.UID] = d
					mu.Unlock()
					break
				}
			}
		}(r)
	}
	for a := 0; a < 2; a++ {
		st := store(t)
		wg.Add(1)
		go func(a int) {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				if _, err := st.Update(ctx, "n1", false, func(l *ledger.Ledger) error {
					l.Demand = plan.Demand{"1g.10gb": 10 + (i+a)%5, "2g.20gb": i % 3}
					_, err := l.Publish("n1/layout", cards)
					return err
				}); err != nil {
					t.Error(err)
				}
			}
		}(a)
	}
	wg.Wait()
	final, _, err := seed.Get(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if err := final.Check(schemes); err != nil {
		t.Fatal(err)
	}
	holders := map[ledger.Device]types.UID{}
	for uid, d := range admitted {
		if other, ok := holders[d]; ok {
			t.Errorf("%s admitted to %s and %s", d, other, uid)
		}
		holders[d] = uid
		if got := final.Holder(d); len(got) != 1 || got[0].UID != uid {
			t.Errorf("%s: held by %v, admitted to %s", d, got, uid)
		}
	}
	if len(admitted) < 10 { // 14 1g fit; a 2g of the demand takes two of them
		t.Errorf("only %d claims admitted: %v", len(admitted), admitted)
	}
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l := <-watched:
			if l.Check(schemes) != nil {
				t.Fatalf("watched an invalid ledger: %+v", l)
			}
			if equalLedger(l, final) {
				return
			}
		case <-deadline:
			t.Fatal("the watch did not see the last version")
		}
	}
}
