// masq-netpol: Kubernetes NetworkPolicy's mirror (docs/kubernetes.md,
// "NetworkPolicy's mirror"). It watches the API server's Namespaces,
// Pods, NetworkPolicies and Multus' NetworkAttachmentDefinitions and
// writes into masq's etcd, below {prefix}/k8s/ only, what NetworkPolicy's
// meaning needs: each namespace's labels, each masq pod's labels, each
// policy. Every masqd reads them there and decides RDMA connections
// (policy/src/netpol); no node needs a Kubernetes credential for it.
//
// Its etcd identity is the certificate masq-signer signs for the CSR of
// the Deployment's init container (masq-signer join-netpol): CN
// masq-netpol, whose etcd role may write {prefix}/k8s/ and nothing else.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const about = `usage: masq-netpol [flags]

Mirrors the API server's Namespaces (labels), masq pods (labels; a pod
is masq's when its k8s.v1.cni.cncf.io/networks annotation names a
NetworkAttachmentDefinition whose CNI configuration runs masq-cni) and
NetworkPolicies into etcd, below {prefix}/k8s/ only:

  {prefix}/k8s/namespaces/{ns}             {"metadata":{"name","labels"}}
  {prefix}/k8s/pods/{ns}/{pod}             {"metadata":{"namespace","name","labels"}}
  {prefix}/k8s/networkpolicies/{ns}/{name} the policy's JSON (metadata.namespace and
                                           .name, spec)

On start, every --resync and after a broken watch it compares all of
{prefix}/k8s/ with the API and writes the differences, deleting keys of
objects gone (a transaction per 100 changes); in between it writes each
change as it comes. While the API server is unreachable it writes
nothing: masqd keeps enforcing the last mirrored state.

Exit status: 0 stopped by SIGTERM or SIGINT; 1 it cannot start (its
certificate, the API server's configuration, masqd's config); 2 a
command-line mistake. Unreachable etcd or API servers are waited for,
logged and retried, never an exit.

Flags:
`

type args struct {
	etcd          []string
	config        string
	prefix        string
	ca, cert, key string
	kubeconfig    string
	resync        time.Duration
	maxOps        int
}

func parseArgs(argv []string, out *os.File) (*args, error) {
	fs := flag.NewFlagSet("masq-netpol", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprint(out, about)
		fs.PrintDefaults()
	}
	var a args
	config := fs.String("config", "/etc/masq/masqd.yaml", "masqd's config: cluster.etcd and cluster.prefix, unless given here")
	etcd := fs.String("etcd", "", "etcd's client URLs, comma-separated (default: masqd's cluster.etcd)")
	fs.StringVar(&a.prefix, "prefix", "", "the prefix of masq's keys (default: masqd's cluster.prefix, else /masq)")
	fs.StringVar(&a.ca, "ca", "/etc/masq-netpol/ca.pem", "the cluster's CA certificate")
	fs.StringVar(&a.cert, "cert", "/etc/masq-netpol/netpol.pem", "the mirror's certificate (CN masq-netpol; masq-signer join-netpol writes it)")
	fs.StringVar(&a.key, "key", "/etc/masq-netpol/netpol-key.pem", "its key")
	fs.StringVar(&a.kubeconfig, "kubeconfig", "", "a kubeconfig (default: the pod's service account)")
	fs.DurationVar(&a.resync, "resync", 10*time.Minute, "how often all of {prefix}/k8s/ is compared with the API (0: only on start and after a watch gap)")
	fs.IntVar(&a.maxOps, "txn-ops", 100, "changes per etcd transaction in a resync (etcd's --max-txn-ops, 128 by default, bounds it)")
	if err := fs.Parse(argv); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (masq-netpol -h)", fs.Arg(0))
	}
	if a.maxOps < 1 {
		return nil, fmt.Errorf("--txn-ops %d: want 1 or more", a.maxOps)
	}
	if *etcd != "" {
		a.etcd = strings.Split(*etcd, ",")
	}
	a.config = *config
	if a.prefix != "" && (!strings.HasPrefix(a.prefix, "/") || strings.HasSuffix(a.prefix, "/")) {
		return nil, fmt.Errorf("--prefix %q: must start with '/' and not end with one", a.prefix)
	}
	return &a, nil
}

// resolve: etcd's URLs and the prefix from masqd's config where the
// command line gave none.
func (a *args) resolve() error {
	if len(a.etcd) == 0 || a.prefix == "" {
		urls, prefix, err := readEtcd(a.config)
		if err != nil {
			return fmt.Errorf("masqd's config (for etcd and prefix): %w", err)
		}
		if len(a.etcd) == 0 {
			a.etcd = urls
		}
		if a.prefix == "" {
			a.prefix = prefix
		}
	}
	if len(a.etcd) == 0 {
		return fmt.Errorf("no etcd URL: give --etcd or cluster.etcd in masqd's config")
	}
	if !strings.HasPrefix(a.prefix, "/") || strings.HasSuffix(a.prefix, "/") {
		return fmt.Errorf("cluster.prefix %q: must start with '/' and not end with one", a.prefix)
	}
	return nil
}

// etcdTLS: the mirror's client certificate and the cluster's CA.
func etcdTLS(a *args) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(a.cert, a.key)
	if err != nil {
		return nil, fmt.Errorf("the mirror's certificate (%s, %s): %w", a.cert, a.key, err)
	}
	caPEM, err := os.ReadFile(a.ca)
	if err != nil {
		return nil, fmt.Errorf("the cluster's CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s holds no PEM certificate", a.ca)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots, MinVersion: tls.VersionTLS12}, nil
}

// etcdClient: a client of a.etcd with the mirror's certificate (it
// connects lazily: an unreachable etcd is an error of each call, retried).
func etcdClient(a *args) (*clientv3.Client, error) {
	tlsCfg, err := etcdTLS(a)
	if err != nil {
		return nil, err
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: a.etcd, TLS: tlsCfg, DialTimeout: 10 * time.Second,
		DialKeepAliveTime: 30 * time.Second, DialKeepAliveTimeout: 10 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("etcd %s: %w", strings.Join(a.etcd, ","), err)
	}
	return c, nil
}

func apiConfig(kubeconfig string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("the API server: %w", err)
	}
	cfg.UserAgent = "masq-netpol"
	return cfg, nil
}

func start(ctx context.Context, a *args) error {
	if err := a.resolve(); err != nil {
		return err
	}
	cfg, err := apiConfig(a.kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	etcd, err := etcdClient(a)
	if err != nil {
		return err
	}
	defer etcd.Close()
	st := newStore(etcd, a.prefix)
	st.maxOps = a.maxOps
	m, run, err := newMirror(client, dyn, st, mirrorArgs{resync: a.resync})
	if err != nil {
		return err
	}
	log.Printf("mirroring namespaces, masq pods and networkpolicies into etcd %s below %s (resync every %s)",
		strings.Join(a.etcd, ","), st.root, a.resync)
	return m.run(ctx, run)
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("masq-netpol: ")
	a, err := parseArgs(os.Args[1:], os.Stderr)
	if err == flag.ErrHelp {
		os.Exit(0)
	}
	if err != nil {
		log.Print(err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = start(ctx, a)
	if ctx.Err() != nil {
		log.Print("stopped")
		return
	}
	if err != nil {
		log.Print(err)
		os.Exit(1)
	}
}
