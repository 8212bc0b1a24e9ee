package nvml

import (
	"fmt"
	"slices"

	"github.com/drakit/drakit/mig"
)

// MigProduct builds the mig product of a GPU from what NVML reports (its
// name and GPU instance profiles) with mig.FromNVML, so that a real GPU's
// own tables take precedence over the built-in catalog. With no profiles
// it is the catalog's product for the name.
func MigProduct(productName string, profs []GPUInstanceProfile) (*mig.Product, error) {
	info := mig.NVMLInfo{ProductName: productName}
	for _, p := range profs {
		info.Profiles = append(info.Profiles, mig.NVMLProfileInfo{
			ID: p.ID, Name: p.Name, SliceCount: p.SliceCount, InstanceCount: p.InstanceCount,
			MemorySizeMB: p.MemoryMiB, Placements: p.Placements, Engines: p.Engines,
		})
	}
	return mig.FromNVML(info)
}

// CatalogDiff compares what NVML reports for a GPU (MigProduct) with the
// built-in catalog entry for its name (mig.Lookup): the same profile
// names, each with the same ID, compute and memory slices, maximum count
// and placement starts, the same engines (mig.Engines), and the same slice
// totals. It returns one line per difference, none when they agree.
// Memory sizes are not compared: the catalog holds nominal sizes.
func CatalogDiff(productName string, profs []GPUInstanceProfile) ([]string, error) {
	if len(profs) == 0 {
		return nil, fmt.Errorf(
			"compare %s with the mig catalog: NVML reported no GPU instance profiles",
			productName,
		)
	}
	cat, err := mig.Lookup(productName)
	if err != nil {
		return nil, err
	}
	got, err := MigProduct(productName, profs)
	if err != nil {
		return nil, err
	}
	var diffs []string
	if got.MemorySlices != cat.MemorySlices || got.ComputeSlices != cat.ComputeSlices {
		diffs = append(
			diffs,
			fmt.Sprintf(
				"geometry: NVML %d memory / %d compute slices, catalog %s %d / %d",
				got.MemorySlices,
				got.ComputeSlices,
				cat.Name,
				cat.MemorySlices,
				cat.ComputeSlices,
			),
		)
	}
	for _, c := range cat.Profiles {
		n, err := got.Profile(c.Name)
		if err != nil {
			diffs = append(
				diffs,
				fmt.Sprintf("%s: in catalog %s, not reported by NVML", c.Name, cat.Name),
			)
			continue
		}
		if n.ID != c.ID || n.ComputeSlices != c.ComputeSlices || n.MemorySlices != c.MemorySlices ||
			n.MaxCount != c.MaxCount ||
			!slices.Equal(n.Starts, c.Starts) {
			diffs = append(
				diffs,
				fmt.Sprintf(
					"%s: NVML id %d, %dg, %d memory slices, max %d, starts %v; catalog id %d, "+
						"%dg, %d, max %d, starts %v",
					c.Name,
					n.ID,
					n.ComputeSlices,
					n.MemorySlices,
					n.MaxCount,
					n.Starts,
					c.ID,
					c.ComputeSlices,
					c.MemorySlices,
					c.MaxCount,
					c.Starts,
				),
			)
		}
		if n.Engines != c.Engines {
			diffs = append(
				diffs,
				fmt.Sprintf("%s: NVML engines %+v; catalog %+v", c.Name, n.Engines, c.Engines),
			)
		}
	}
	for _, n := range got.Profiles {
		if _, err := cat.Profile(n.Name); err != nil {
			diffs = append(
				diffs,
				fmt.Sprintf(
					"%s: reported by NVML (id %d), not in catalog %s",
					n.Name,
					n.ID,
					cat.Name,
				),
			)
		}
	}
	return diffs, nil
}
