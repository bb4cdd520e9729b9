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
// It fails the container's creation, saying why, when masqd cannot answer
// or refuses the pod's cgroup: a pod that asked for masq must not run
// without its device or unfiltered.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

// cdiKind is the kind of masqd's CDI devices (backend/src/operator/cdi.rs).
const cdiKind = "masq.io/endpoint"

type plugin struct {
	masqd *masqd
}

func (p *plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	what := fmt.Sprintf("pod %s/%s container %s", pod.GetNamespace(), pod.GetName(), ctr.GetName())
	names, cgroup, err := p.masqd.adoptPod(pod.GetId(), pod.GetPid())
	if err != nil {
		return nil, nil, fmt.Errorf("masq-nri: %s: %w", what, err)
	}
	if len(names) == 0 {
		return nil, nil, nil
	}
	if cgroup != "" {
		log.Printf("%s: endpoint %s, the backstop filters cgroup %s", what, names[0], cgroup)
	}
	adjust := &api.ContainerAdjustment{}
	for _, name := range names {
		adjust.AddCDIDevice(&api.CDIDevice{Name: cdiKind + "=" + name})
		log.Printf("%s: device %s=%s", what, cdiKind, name)
	}
	return adjust, nil, nil
}

func main() {
	socket := flag.String("socket", "/run/masq/control.sock", "masqd's control socket")
	nriSocket := flag.String("nri-socket", "/var/run/nri/nri.sock", "the runtime's NRI socket")
	index := flag.String("idx", "50", "the plugin's index among the runtime's NRI plugins (its order)")
	timeout := flag.Duration("timeout", 5*time.Second, "how long one request to masqd may take")
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

	p := &plugin{masqd: &masqd{socket: *socket, timeout: *timeout}}
	s, err := stub.New(p, stub.WithPluginName("masq"), stub.WithPluginIdx(*index),
		stub.WithSocketPath(*nriSocket), stub.WithOnClose(func() {
			log.Printf("the runtime closed the connection")
			os.Exit(1)
		}))
	if err != nil {
		log.Fatalf("%v", err)
	}
	log.Printf("connecting to %s; masqd at %s", *nriSocket, *socket)
	if err := s.Run(context.Background()); err != nil {
		log.Fatalf("%v", err)
	}
}
