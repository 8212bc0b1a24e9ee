package driver

// TEMPORARY until the migmodel branch is merged (mig.CounterModel.Pools,
// mig.DefaultProfiles): then this file goes.

import (
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/drakit/drakit/device"
	"github.com/drakit/drakit/mig"
)

func defaultProfiles(p *mig.Product) []string { return p.ProfileNames() }

func modelPools(m mig.CounterModel, name string) []device.Pool {
	pool := device.Pool{Name: name}
	for _, cs := range m.CounterSets {
		c := device.CounterSet{Name: cs.Name, Counters: map[string]resource.Quantity{}}
		for k, v := range cs.Counters {
			c.Counters[k] = v.Value
		}
		pool.CounterSets = append(pool.CounterSets, c)
	}
	for _, rd := range m.Devices {
		d := device.New(rd.Name)
		for k, a := range rd.Attributes {
			switch {
			case a.StringValue != nil:
				d.StringAttribute(string(k), *a.StringValue)
			case a.IntValue != nil:
				d.IntAttribute(string(k), *a.IntValue)
			case a.BoolValue != nil:
				d.BoolAttribute(string(k), *a.BoolValue)
			case a.VersionValue != nil:
				d.VersionAttribute(string(k), *a.VersionValue)
			}
		}
		for k, c := range rd.Capacity {
			d.Capacity(string(k), c.Value, nil)
		}
		for _, cc := range rd.ConsumesCounters {
			m := map[string]resource.Quantity{}
			for k, v := range cc.Counters {
				m[k] = v.Value
			}
			d.ConsumesCounters(cc.CounterSet, m)
		}
		pool.Devices = append(pool.Devices, d)
	}
	return []device.Pool{pool}
}
