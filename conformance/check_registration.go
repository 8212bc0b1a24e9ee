package conformance

import (
	"context"
	"fmt"
	"time"

	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/drakit/drakit/internal/kubeletclient"
)

// setupRegistration finds the registration socket and asks it GetInfo,
// as the kubelet's plugin watcher does.
func (r *runner) setupRegistration(ctx context.Context) error {
	socket, info, err := r.find(ctx)
	if err != nil {
		return broken("%v\nServe pluginregistration.Registration on a unix socket in the kubelet's plugin registry (kubeletplugin names it <driver>-reg.sock).", err)
	}
	r.regSocket, r.info = socket, info
	return nil
}

// setupEndpoint dials the endpoint GetInfo reported.
func (r *runner) setupEndpoint(ctx context.Context) error {
	if err := r.connect(ctx); err != nil {
		return broken("%v\nGetInfo's endpoint %q (translated: %q) must be a unix socket serving the DRA node service; if the driver runs in another mount namespace, give a path mapping", err, r.info.Endpoint, translate(r.info.Endpoint, r.cfg.PathMappings))
	}
	return nil
}

// setupNode confirms the registration, as the kubelet does before it
// calls the node service.
func (r *runner) setupNode(ctx context.Context) error {
	if err := kubeletclient.NotifyRegistration(ctx, r.regSocket, true, ""); err != nil {
		return err
	}
	r.registered = time.Now()
	return nil
}

func (r *runner) checkRegistrationSocket(ctx context.Context) outcome {
	if o := r.judge(ctx, fxRegistration); o != nil {
		return *o
	}
	return pass("%s answers GetInfo", r.regSocket)
}

func (r *runner) checkRegistrationType(context.Context) outcome {
	if r.info.Type != registerapi.DRAPlugin {
		return fail("GetInfo reports type %q; report %q", r.info.Type, registerapi.DRAPlugin)
	}
	return pass("type %s", r.info.Type)
}

func (r *runner) checkRegistrationName(context.Context) outcome {
	if r.info.Name != r.cfg.DriverName {
		return fail("GetInfo reports name %q; report the driver name %q that the ResourceSlices use", r.info.Name, r.cfg.DriverName)
	}
	return pass("name %s", r.info.Name)
}

func (r *runner) checkRegistrationVersions(context.Context) outcome {
	// Entries the kubelet does not know it ignores: noted, not failed.
	var f failures
	var unknown []string
	for _, v := range r.info.SupportedVersions {
		if kubeletclient.FirstKnown([]string{v}, append(append([]string{}, kubeletclient.NodeServices...), kubeletclient.HealthServices...)) == "" {
			unknown = append(unknown, v)
		}
	}
	node := kubeletclient.FirstKnown(r.info.SupportedVersions, kubeletclient.NodeServices)
	if node == "" {
		f.add("supported_versions %q name no DRA node service the kubelet knows; list %q (and/or %q)", r.info.SupportedVersions, kubeletclient.NodeServices[0], kubeletclient.NodeServices[1])
	}
	msg := fmt.Sprintf("%q; the kubelet uses %s", r.info.SupportedVersions, node)
	if len(unknown) > 0 {
		msg += fmt.Sprintf("; entries the kubelet ignores: %q", unknown)
	}
	return f.outcome("%s", msg)
}

func (r *runner) checkRegistrationEndpoint(ctx context.Context) outcome {
	if o := r.judge(ctx, fxEndpoint); o != nil {
		return *o
	}
	return pass("%s is ready; using %s", r.endpoint, r.nodeService)
}

func (r *runner) checkRegistrationNotify(ctx context.Context) outcome {
	if o := r.judge(ctx, fxNode); o != nil {
		return *o
	}
	return pass("accepted")
}
