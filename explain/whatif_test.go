package explain

import (
	"context"
	"os"
	"testing"
)

func loadClaim(t *testing.T, snap *Snapshot, file string) *Snapshot {
	t.Helper()
	s, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestPrint(t *testing.T) {
	snap, err := Load("testdata/fleet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	subj := loadClaim(t, snap, "testdata/train-claim.yaml")
	rep, err := Claim(context.Background(), snap, subj.Claims[0])
	if err != nil {
		t.Fatal(err)
	}
	rep.WriteText(os.Stdout, WithDetails(100))

}
