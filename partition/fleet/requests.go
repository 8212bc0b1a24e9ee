package fleet

import (
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
)

// claimProfiles is what a pending claim asks of the layout: one profile
// per device, from the requests whose class is mapped (for a request with
// subrequests, the first subrequest whose class is mapped: the scheduler
// tries them in order). A request for all devices of a class counts one.
func (p *Planner) claimProfiles(c *resourceapi.ResourceClaim) []string {
	var out []string
	add := func(class string, mode resourceapi.DeviceAllocationMode, count int64) bool {
		profile, ok := p.o.classProfile(class)
		if !ok {
			return false
		}
		n := int64(1)
		if mode != resourceapi.DeviceAllocationModeAll && count > 1 {
			n = min(count, 64)
		}
		for i := int64(0); i < n; i++ {
			out = append(out, profile)
		}
		return true
	}
	for _, r := range c.Spec.Devices.Requests {
		if r.Exactly != nil {
			add(r.Exactly.DeviceClassName, r.Exactly.AllocationMode, r.Exactly.Count)
			continue
		}
		for _, s := range r.FirstAvailable {
			if add(s.DeviceClassName, s.AllocationMode, s.Count) {
				break
			}
		}
	}
	return out
}

// extendedProfiles is what a pod asks of the layout as extended
// resources (the scheduler makes a claim for them only at bind): per
// mapped resource the larger of the containers' sum and the largest init
// container's request.
func (p *Planner) extendedProfiles(pod *corev1.Pod) []string {
	if p.o.extended == nil {
		return nil
	}
	qty := func(r corev1.ResourceRequirements, name corev1.ResourceName) int64 {
		if q, ok := r.Requests[name]; ok {
			return q.Value()
		}
		if q, ok := r.Limits[name]; ok {
			return q.Value()
		}
		return 0
	}
	names := map[corev1.ResourceName]string{}
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for _, c := range cs {
			for _, l := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
				for name := range l {
					if profile, ok := p.o.extended(name); ok {
						names[name] = profile
					}
				}
			}
		}
	}
	var out []string
	for name, profile := range names {
		sum, initMax := int64(0), int64(0)
		for _, c := range pod.Spec.Containers {
			sum += qty(c.Resources, name)
		}
		for _, c := range pod.Spec.InitContainers {
			initMax = max(initMax, qty(c.Resources, name))
		}
		for i := int64(0); i < min(max(sum, initMax), 64); i++ {
			out = append(out, profile)
		}
	}
	return out
}

// pending reports whether the scheduler may still place pod.
func pending(pod *corev1.Pod) bool {
	return pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil &&
		len(pod.Spec.SchedulingGates) == 0 &&
		pod.Status.Phase != corev1.PodSucceeded &&
		pod.Status.Phase != corev1.PodFailed
}
