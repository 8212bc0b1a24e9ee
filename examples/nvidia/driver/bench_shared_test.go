package driver_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	kit "github.com/drakit/drakit/driver"
	"github.com/drakit/drakit/driver/drivertest"
	nvdriver "github.com/drakit/drakit/examples/nvidia/driver"
	"github.com/drakit/drakit/examples/nvidia/nvml/nvmlsim"
	"github.com/drakit/drakit/mig"
	"github.com/drakit/drakit/testenv"
)

// sharedStart opens a fresh simulated DGX H200 with GPU 1 shared, its
// MPS daemon the simulator's stand-in run by this test binary
// (TestMPSStandInHelperProcess), and makes the driver for node.
func sharedStart(b testing.TB) func(node string) ([]kit.Option, error) {
	return func(node string) ([]kit.Option, error) {
		dir, err := os.MkdirTemp("", "mpsb")
		if err != nil {
			return nil, err
		}
		b.Cleanup(func() { _ = os.RemoveAll(dir) })
		state := filepath.Join(dir, "gpus.json")
		sim, err := nvmlsim.Open(state, nvmlsim.WithServer("dgx-h200"),
			nvmlsim.WithSetup(nvmlsim.Setup{MIGGPUs: []int{}}))
		if err != nil {
			return nil, err
		}
		ctl := nvdriver.MPSControl{
			Command: []string{os.Args[0], "-test.run=^TestMPSStandInHelperProcess$",
				"-test.count=1", "--"},
			Env: []string{"DRAKIT_TEST_MPS_STANDIN=1", nvmlsim.EnvSimState + "=" + state},
		}
		d, err := nvdriver.New(sim, node, nvdriver.WithStateDir(filepath.Join(dir, "state")),
			nvdriver.WithSharedGPUs("1"), nvdriver.WithMPSControl(ctl))
		if err != nil {
			return nil, err
		}
		b.Cleanup(func() { _ = d.Close() })
		return d.Options(), nil
	}
}

func newShareID(b testing.TB) types.UID {
	var u [16]byte
	if _, err := rand.Read(u[:]); err != nil {
		b.Fatal(err)
	}
	u[6], u[8] = u[6]&0x0f|0x40, u[8]&0x3f|0x80
	return types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]))
}

// cycleTimes prepares and unprepares n claims of dev, one at a time, over
// the kubelet's gRPC protocol and returns the prepare call times.
func cycleTimes(ctx context.Context, b *testing.B, env *testenv.Env, d *benchDriver, name string,
	dev func() drivertest.Device, n int) []time.Duration {
	b.Helper()
	kl, err := drivertest.Dial(d.k.DRASocket())
	if err != nil {
		b.Fatal(err)
	}
	defer kl.Close()
	out := make([]time.Duration, 0, n)
	for i := range n {
		claim, err := drivertest.CreateAllocatedClaim(ctx, env.Client, drivertest.ClaimSpec{
			Namespace: "default", Name: fmt.Sprintf("%s-%d", name, i), Driver: nvdriver.DriverName,
			Devices: []drivertest.Device{dev()}})
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if _, err := kl.Prepare(ctx, claim); err != nil {
			b.Fatal(err)
		}
		out = append(out, time.Since(t0))
		if err := kl.Unprepare(ctx, claim); err != nil {
			b.Fatal(err)
		}
		if err := env.Client.ResourceV1().ResourceClaims("default").Delete(ctx, claim.Name,
			metav1.DeleteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	return out
}

// BenchmarkSharePrepare measures, once per b.N round (-benchtime=5x for
// five rounds), the reference driver's prepare of an MPS share against
// the prepare of a whole GPU on the same driver, over the kubelet's gRPC
// protocol, interleaved:
//
//   - whole: a claim for full GPU 0;
//   - first share: a share of GPU 1 while it has no other, so the prepare
//     starts the GPU's MPS daemon (and the unprepare stops it);
//   - next share: a share of GPU 1 while another holds it: the daemon is
//     reused.
//
// It prints each round's p50 and the median ratio to the whole GPU with
// its range. It needs the cluster binaries.
func BenchmarkSharePrepare(b *testing.B) {
	env := testenv.Start(b)
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	ctx := context.Background()
	const n = 8
	var rows [][]string
	var firstR, nextR []float64
	for round := range b.N {
		node := fmt.Sprintf("share-prep-%d", round)
		if err := env.AddFakeNode(ctx, node, nil); err != nil {
			b.Fatal(err)
		}
		d := runDriver(ctx, b, env, nvdriver.DriverName, node, sharedStart(b))
		pool := mig.GPUPoolName(node, 1)
		share := func() drivertest.Device {
			return drivertest.Device{Pool: pool, Device: "gpu-1" + nvdriver.SharedSuffix,
				ShareID: newShareID(b),
				ConsumedCapacity: map[string]string{mig.CapMemory: "12Gi",
					nvdriver.CapCompute: "10"}}
		}
		whole := func() drivertest.Device { return drivertest.Device{Pool: node, Device: "gpu-0"} }
		var wholeT, firstT, nextT []time.Duration
		for i := range 4 { // interleaved
			wholeT = append(wholeT, cycleTimes(ctx, b, env, d, fmt.Sprintf("whole-%d-%d", round, i),
				whole, n/4)...)
			firstT = append(firstT, cycleTimes(ctx, b, env, d, fmt.Sprintf("first-%d-%d", round, i),
				share, n/4)...)
			// One share held: the next ones reuse its daemon.
			kl, err := drivertest.Dial(d.k.DRASocket())
			if err != nil {
				b.Fatal(err)
			}
			held, err := drivertest.CreateAllocatedClaim(ctx, env.Client,
				drivertest.ClaimSpec{Namespace: "default",
					Name: fmt.Sprintf("held-%d-%d", round,
						i), Driver: nvdriver.DriverName, Devices: []drivertest.Device{share()}})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := kl.Prepare(ctx, held); err != nil {
				b.Fatal(err)
			}
			nextT = append(nextT, cycleTimes(ctx, b, env, d, fmt.Sprintf("next-%d-%d", round, i),
				share, n/4)...)
			if err := kl.Unprepare(ctx, held); err != nil {
				b.Fatal(err)
			}
			kl.Close()
		}
		d.stop()
		w := pct(wholeT, 0.5)
		firstR = append(firstR, float64(pct(firstT, 0.5))/float64(w))
		nextR = append(nextR, float64(pct(nextT, 0.5))/float64(w))
		rows = append(rows, []string{fmt.Sprint(round), fmt.Sprintf("%.2f", ms(w)),
			fmt.Sprintf("%.2f", ms(pct(firstT, 0.5))), fmt.Sprintf("%.2f", ms(pct(nextT, 0.5)))})
	}
	tw := tabwriter.NewWriter(os.Stdout, 2, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "round\tprepare p50 ms: whole GPU\tfirst share (daemon start)\t"+
		"next share (daemon running)")
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	fmt.Fprintf(tw, "vs whole GPU, median [min..max]\t1x\t%s\t%s\n", spread(firstR), spread(nextR))
	tw.Flush()
}
