package driver

import "github.com/prometheus/client_golang/prometheus"

// ErrorCount reads drakit_driver_errors_total{operation,reason} from g.
func ErrorCount(g prometheus.Gatherer, op, reason string) float64 {
	mfs, err := g.Gather()
	if err != nil {
		return -1
	}
	for _, mf := range mfs {
		if mf.GetName() != "drakit_driver_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["operation"] == op && labels["reason"] == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
