// masq-signer: a node's cluster identity without an operator's hand
// (docs/kubernetes.md). Two commands from one binary in masq's image:
//
//	masq-signer join        the DaemonSet's first init container: asks the
//	                        API server for this node's certificate (a CSR
//	                        for masq.io/node) unless the one in
//	                        /etc/masq/pki will do, and writes it there
//	masq-signer join-netpol NetworkPolicy's mirror's init container: asks
//	                        for masq-netpol's etcd certificate (a CSR for
//	                        masq.io/netpol) and writes it for the mirror
//	masq-signer controller  the Deployment: checks each masq.io/node and
//	                        masq.io/netpol CSR, denies it naming the failed
//	                        check or makes the etcd role and signs it
//
// The CA's key stays in the controller's Secret: a node holds only its
// own key, so a compromised node cannot mint another's identity.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const usage = `usage: masq-signer join [flags]        (masq-signer join -h)
       masq-signer join-netpol [flags] (masq-signer join-netpol -h)
       masq-signer controller [flags]  (masq-signer controller -h)`

func client(kubeconfig string) (kubernetes.Interface, error) {
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
	cfg.UserAgent = "masq-signer"
	return kubernetes.NewForConfig(cfg)
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("masq-signer: ")
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "join":
		err = joinMain(ctx, os.Args[2:])
	case "join-netpol":
		err = joinNetpolMain(ctx, os.Args[2:])
	case "controller":
		err = controllerMain(ctx, os.Args[2:])
	default:
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func joinMain(ctx context.Context, argv []string) error {
	fs := flag.NewFlagSet("join", flag.ExitOnError)
	var a joinArgs
	fs.StringVar(&a.node, "node", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	fs.StringVar(&a.config, "config", "/etc/masq/masqd.yaml", "masqd's config: the underlay whose IP the certificate names")
	fs.StringVar(&a.caFile, "ca", "/var/run/masq-ca/ca.pem", "the cluster's CA certificate (the ConfigMap masq-ca)")
	fs.StringVar(&a.pki, "pki", "/etc/masq/pki", "where ca.pem, host.pem and host-key.pem go")
	fs.DurationVar(&a.timeout, "timeout", 5*time.Minute, "how long to wait for the certificate")
	kubeconfig := fs.String("kubeconfig", "", "a kubeconfig (default: the pod's service account)")
	_ = fs.Parse(argv)
	c, err := client(*kubeconfig)
	if err != nil {
		return err
	}
	return join(ctx, c, a)
}

func joinNetpolMain(ctx context.Context, argv []string) error {
	fs := flag.NewFlagSet("join-netpol", flag.ExitOnError)
	var a netpolJoinArgs
	fs.StringVar(&a.caFile, "ca", "/var/run/masq-ca/ca.pem", "the cluster's CA certificate (the ConfigMap masq-ca)")
	fs.StringVar(&a.dir, "dir", "/etc/masq-netpol", "where ca.pem, netpol.pem and netpol-key.pem go (masq-netpol's --ca, --cert, --key)")
	fs.DurationVar(&a.timeout, "timeout", 5*time.Minute, "how long to wait for the certificate")
	kubeconfig := fs.String("kubeconfig", "", "a kubeconfig (default: the pod's service account)")
	_ = fs.Parse(argv)
	c, err := client(*kubeconfig)
	if err != nil {
		return err
	}
	return joinNetpol(ctx, c, a)
}

func controllerMain(ctx context.Context, argv []string) error {
	fs := flag.NewFlagSet("controller", flag.ExitOnError)
	var a controllerArgs
	secret := fs.String("secret", "/etc/masq-signer", "the Secret's files: ca.pem, ca-key.pem, root.pem, root-key.pem")
	config := fs.String("config", "/etc/masq/masqd.yaml", "masqd's config: etcd and prefix, unless given here")
	etcd := fs.String("etcd", "", "etcd's client URLs, comma-separated (default: masqd's cluster.etcd)")
	fs.StringVar(&a.prefix, "prefix", "", "the prefix of masq's keys (default: masqd's cluster.prefix)")
	fs.StringVar(&a.operator, "operator", "operator", "the operator's etcd user, as given to the first init-auth (no node may have this name)")
	fs.StringVar(&a.masqctl, "masqctl", "masqctl", "masqctl, which makes the node's etcd role")
	fs.StringVar(&a.namespace, "namespace", "masq-system", "masq's namespace")
	fs.StringVar(&a.holders, "holders", "masq-node-ips", "the ConfigMap recording which node holds which IP")
	requestor := fs.String("requestor", "masqd", "the service account (in --namespace) nodes ask with")
	netpolRequestor := fs.String("netpol-requestor", "masq-netpol", "the service account (in --namespace) NetworkPolicy's mirror asks with")
	kubeconfig := fs.String("kubeconfig", "", "a kubeconfig (default: the pod's service account)")
	_ = fs.Parse(argv)
	a.caCert, a.caKey = *secret+"/ca.pem", *secret+"/ca-key.pem"
	a.rootCert, a.rootKey = *secret+"/root.pem", *secret+"/root-key.pem"
	a.policy = policy{
		requestor:       "system:serviceaccount:" + a.namespace + ":" + *requestor,
		netpolRequestor: "system:serviceaccount:" + a.namespace + ":" + *netpolRequestor,
		reserved:        []string{"root", a.operator, netpolUser},
	}
	if *etcd != "" {
		a.etcd = strings.Split(*etcd, ",")
	}
	if len(a.etcd) == 0 || a.prefix == "" {
		cfg, err := readMasqdConfig(*config)
		if err != nil {
			return fmt.Errorf("masqd's config (for etcd and prefix): %w", err)
		}
		urls, prefix := cfg.etcd()
		if len(a.etcd) == 0 {
			a.etcd = urls
		}
		if a.prefix == "" {
			a.prefix = prefix
		}
	}
	c, err := client(*kubeconfig)
	if err != nil {
		return err
	}
	return runController(ctx, c, a)
}
