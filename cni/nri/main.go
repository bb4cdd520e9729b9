// masq-nri: the NRI plugin (containerd 2, CRI-O) that gives every
// container of a Kubernetes pod attached to a masq network (masq-cni in the
// pod's CNI chain, e.g. through a Multus NetworkAttachmentDefinition) the
// pod's masq device, and has masqd's software-RoCE backstop filter the pod
// before any of its apps runs.
//
// A device plugin cannot do this: its Allocate is given device IDs, not the
// pod, so it cannot name the pod's endpoint. NRI hands the plugin the pod
// itself as each container is created. masq-nri then asks masqd, in one
// request, which endpoints masq-cni made for the pod (the endpoint's CNI
// attachment names the pod sandbox's ID) and to adopt the pod's cgroup for
// the first one (software RoCE only; a hardware RNIC's QPs are audited
// instead), and adds the CDI device masq.io/endpoint=NAME to the container,
// which the runtime resolves from the spec masqd wrote for the endpoint. A container
// of a pod with no masq endpoint is left as it is.
//
// Whether a pod asked for masq is decided from the pod itself, before masqd
// is asked anything: masq-cni leaves a marker for the pod's sandbox at its
// CNI ADD (pods.go). A pod without one, and every pod of the namespaces
// left alone (masq-system, where masqd itself runs), is never failed and
// never waits on masqd, so a node whose masqd is down or restarting still
// starts kube-proxy, its CNI's pods and masqd's own. A pod that asked for
// masq and cannot have it (masqd does not answer within --timeout, below
// the runtime's NRI request timeout, or refuses the pod's cgroup, or has
// no endpoint for it) fails its container's creation with the reason: it
// must not run without its device or unfiltered.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

// cdiKind is the kind of masqd's CDI devices (backend/src/operator/cdi.rs).
const cdiKind = "masq.io/endpoint"

// defaultTimeout bounds a request to masqd: below containerd's default NRI
// request timeout (2 s), with room for the runtime's own work.
const defaultTimeout = 1500 * time.Millisecond

type plugin struct {
	masqd *masqd
	// pods is masq-cni's marker directory (pods.go).
	pods string
	// ignored namespaces' pods are left alone, whatever they carry.
	ignored map[string]bool
}

func (p *plugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	adjust, err := p.adjust(ctx, pod, ctr)
	return adjust, nil, err
}

// adjust decides one container: nil for a pod that did not ask for masq,
// its devices for one that did, an error naming why one that did cannot
// have them.
func (p *plugin) adjust(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, error) {
	if p.ignored[pod.GetNamespace()] {
		return nil, nil
	}
	what := fmt.Sprintf("pod %s/%s container %s", pod.GetNamespace(), pod.GetName(), ctr.GetName())
	asked, err := askedFor(p.pods, pod.GetId())
	if err != nil {
		// Not knowing is not a reason to stop the node's pods: a pod that
		// asked but gets no device has no RDMA device node either.
		log.Printf("%s: cannot read masq-cni's markers in %s, so no masq device: %v", what, p.pods, err)
		return nil, nil
	}
	if len(asked) == 0 {
		return nil, nil
	}
	fail := func(why error) error {
		return fmt.Errorf("masq-nri: %s asked for masq (%s) and cannot have it: %w", what, asked[0], why)
	}
	names, cgroup, err := p.masqd.adoptPod(ctx, pod.GetId(), pod.GetPid())
	if err != nil {
		return nil, fail(err)
	}
	if len(names) == 0 {
		return nil, fail(fmt.Errorf("masqd at %s has no endpoint for sandbox %s", p.masqd.socket, pod.GetId()))
	}
	if cgroup != "" {
		log.Printf("%s: endpoint %s, the backstop filters cgroup %s", what, names[0], cgroup)
	}
	adjust := &api.ContainerAdjustment{}
	for _, name := range names {
		adjust.AddCDIDevice(&api.CDIDevice{Name: cdiKind + "=" + name})
		log.Printf("%s: device %s=%s", what, cdiKind, name)
	}
	return adjust, nil
}

// namespaces splits a comma-separated list.
func namespaces(list string) map[string]bool {
	out := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out[n] = true
		}
	}
	return out
}

func main() {
	socket := flag.String("socket", "/run/masq/control.sock", "masqd's control socket")
	nriSocket := flag.String("nri-socket", "/var/run/nri/nri.sock", "the runtime's NRI socket")
	index := flag.String("idx", "50", "the plugin's index among the runtime's NRI plugins (its order)")
	timeout := flag.Duration("timeout", defaultTimeout,
		"how long one request to masqd may take; keep it below the runtime's NRI request timeout\n"+
			"(containerd's plugin_request_timeout, 2s by default), so that a pod that asked for masq\n"+
			"fails with masq-nri's reason rather than the runtime's timeout")
	pods := flag.String("pods", "", "masq-cni's marker directory (default: pods/ beside --socket)")
	ignore := flag.String("ignore-namespaces", "masq-system",
		"comma-separated namespaces whose pods masq-nri leaves alone")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: masq-nri [options]\n\n"+
			"NRI plugin: gives each container of a pod attached to a masq network its\n"+
			"masq device (CDI masq.io/endpoint=NAME) and has masqd filter the pod's cgroup.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix("masq-nri: ")

	if *pods == "" {
		*pods = filepath.Join(filepath.Dir(*socket), "pods")
	}
	p := &plugin{masqd: &masqd{socket: *socket, timeout: *timeout}, pods: *pods, ignored: namespaces(*ignore)}
	s, err := stub.New(p, stub.WithPluginName("masq"), stub.WithPluginIdx(*index),
		stub.WithSocketPath(*nriSocket), stub.WithOnClose(func() {
			log.Printf("the runtime closed the connection")
			os.Exit(1)
		}))
	if err != nil {
		log.Fatalf("%v", err)
	}
	waitForSocket(*nriSocket, 5*time.Second, time.Minute)
	log.Printf("connecting to %s; masqd at %s, masq-cni's markers in %s, request timeout %s",
		*nriSocket, *socket, *pods, *timeout)
	if err := s.Run(context.Background()); err != nil {
		log.Fatalf("%v", err)
	}
}

// waitForSocket returns once path exists, saying every `remind` what is
// missing: a runtime with NRI off (containerd 1.7's default) has no
// socket, and masq-nri waits for it rather than restarting over and over
// beside masqd. The node's pods run meanwhile, masq's without a device.
func waitForSocket(path string, poll, remind time.Duration) {
	var last time.Time
	for {
		_, err := os.Stat(path)
		if err == nil {
			return
		}
		if time.Since(last) >= remind {
			log.Printf("waiting for the runtime's NRI socket %s (%v): is NRI enabled? "+
				"containerd 1.7: [plugins.\"io.containerd.nri.v1.nri\"] disable = false; "+
				"until then, pods get no masq device", path, err)
			last = time.Now()
		}
		time.Sleep(poll)
	}
}
