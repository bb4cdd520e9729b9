package main

import (
	"context"
	"fmt"
	"log"
	"os/exec"
	"strings"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// controllerArgs: what `masq-signer controller` is told.
type controllerArgs struct {
	caCert, caKey, rootCert, rootKey string
	etcd                             []string
	prefix, operator, masqctl        string
	namespace, holders               string
	policy                           policy
}

type controller struct {
	args   controllerArgs
	client kubernetes.Interface
	ca     *ca
	queue  workqueue.TypedRateLimitingInterface[string]
}

func runController(ctx context.Context, client kubernetes.Interface, a controllerArgs) error {
	authority, err := loadCA(a.caCert, a.caKey)
	if err != nil {
		return fmt.Errorf("the CA: %w", err)
	}
	if len(a.etcd) == 0 {
		return fmt.Errorf("no etcd URL: give --etcd or cluster.etcd in masqd's config")
	}
	c := &controller{
		args:   a,
		client: client,
		ca:     authority,
		queue: workqueue.NewTypedRateLimitingQueue(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](2*time.Second, 5*time.Minute)),
	}
	enqueue := func(obj any) {
		if csr, ok := obj.(*certv1.CertificateSigningRequest); ok {
			c.queue.Add(csr.Name)
		}
	}
	// Only masq's signers' CSRs, an informer each: the API server filters
	// them by signer (a field selector has no OR).
	var synced []cache.InformerSynced
	for _, signer := range []string{signerName, netpolSignerName} {
		informer := cache.NewSharedIndexInformer(
			cache.NewFilteredListWatchFromClient(client.CertificatesV1().RESTClient(), "certificatesigningrequests",
				metav1.NamespaceAll, func(o *metav1.ListOptions) {
					o.FieldSelector = fields.OneTermEqualSelector("spec.signerName", signer).String()
				}),
			&certv1.CertificateSigningRequest{}, 0, cache.Indexers{})
		if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    enqueue,
			UpdateFunc: func(_, obj any) { enqueue(obj) },
		}); err != nil {
			return err
		}
		go informer.Run(ctx.Done())
		synced = append(synced, informer.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("the CSRs' cache never synced")
	}
	log.Printf("signing %s and %s CSRs with %s (CA %q, until %s); etcd %s, prefix %s",
		signerName, netpolSignerName, a.caCert, authority.cert.Subject.CommonName,
		authority.cert.NotAfter.Format(time.RFC3339), strings.Join(a.etcd, ","), a.prefix)
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	for c.next(ctx) {
	}
	return ctx.Err()
}

func (c *controller) next(ctx context.Context) bool {
	name, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(name)
	if err := c.handle(ctx, name); err != nil {
		log.Printf("csr %s: left unsigned, retried with backoff (failure %d): %v", name, c.queue.NumRequeues(name)+1, err)
		c.queue.AddRateLimited(name)
		return true
	}
	c.queue.Forget(name)
	return true
}

// finished: a CSR with its certificate, or denied, or failed.
func finished(csr *certv1.CertificateSigningRequest) bool {
	if len(csr.Status.Certificate) > 0 {
		return true
	}
	for _, cond := range csr.Status.Conditions {
		if cond.Type == certv1.CertificateDenied || cond.Type == certv1.CertificateFailed {
			return true
		}
	}
	return false
}

func approved(csr *certv1.CertificateSigningRequest) bool {
	for _, cond := range csr.Status.Conditions {
		if cond.Type == certv1.CertificateApproved {
			return true
		}
	}
	return false
}

// handle decides one CSR. An error leaves it as it is, to be retried.
func (c *controller) handle(ctx context.Context, name string) error {
	// The API server's own copy, not the cache's: the cache may not have
	// this controller's last update yet.
	csr, err := c.client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if finished(csr) {
		return nil
	}
	switch csr.Spec.SignerName {
	case signerName:
	case netpolSignerName:
		r, refused := checkNetpolRequest(c.args.policy, csr)
		if refused != nil {
			return c.deny(ctx, csr, refused)
		}
		return c.acceptNetpol(ctx, csr, r)
	default:
		return nil
	}
	r, refused := checkRequest(c.args.policy, csr)
	if refused == nil {
		node, err := c.client.CoreV1().Nodes().Get(ctx, r.node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			node = nil
		} else if err != nil {
			return fmt.Errorf("node %s: %w", r.node, err)
		}
		holders, err := c.holders(ctx)
		if err != nil {
			return err
		}
		refused = checkNode(r, node, holders.Data)
		if refused == nil {
			return c.accept(ctx, csr, r, holders)
		}
	}
	return c.deny(ctx, csr, refused)
}

// deny: Denied, naming the failed check; or Failed if someone approved
// it already (a CSR cannot be both approved and denied): approval alone
// never gets a certificate that fails the checks.
func (c *controller) deny(ctx context.Context, csr *certv1.CertificateSigningRequest, why *refusal) error {
	cond := certv1.CertificateDenied
	if approved(csr) {
		cond = certv1.CertificateFailed
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certv1.CertificateSigningRequestCondition{
		Type:           cond,
		Status:         corev1.ConditionTrue,
		Reason:         why.Reason,
		Message:        why.Message,
		LastUpdateTime: metav1.Now(),
	})
	csrs := c.client.CertificatesV1().CertificateSigningRequests()
	var err error
	if cond == certv1.CertificateDenied {
		_, err = csrs.UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{})
	} else {
		_, err = csrs.UpdateStatus(ctx, csr, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("marking it %s (%s): %w", cond, why, err)
	}
	log.Printf("csr %s: %s: %s: %s (asked by %s)", csr.Name, strings.ToLower(string(cond)), why.Reason,
		why.Message, csr.Spec.Username)
	return nil
}

// accept: the IP recorded as the node's, the node's etcd role made, then
// the CSR approved and its certificate published. Each step is
// idempotent, so a failed one is retried from the start.
func (c *controller) accept(ctx context.Context, csr *certv1.CertificateSigningRequest, r *request,
	holders *corev1.ConfigMap) error {
	ip := r.ip.String()
	if holders.Data[ip] != r.node {
		if holders.Data == nil {
			holders.Data = map[string]string{}
		}
		holders.Data[ip] = r.node
		if _, err := c.client.CoreV1().ConfigMaps(c.args.namespace).Update(ctx, holders,
			metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("recording %s as node %s's in ConfigMap %s: %w", ip, r.node, c.args.holders, err)
		}
		log.Printf("csr %s: IP %s recorded as node %s's (ConfigMap %s/%s)", csr.Name, ip, r.node,
			c.args.namespace, c.args.holders)
	}
	made, err := c.initAuth(ctx, r.node+"="+ip, initAuthArgs(c.args, r.node+"="+ip))
	if err != nil {
		return err
	}
	valid, err := c.approveAndSign(ctx, csr, r, "MasqNodeChecked",
		fmt.Sprintf("node %s's pod asked for its own name and underlay IP %s", r.node, ip))
	if err != nil {
		return err
	}
	log.Printf("csr %s: signed for node %s, IP %s, valid %s; etcd role masq-host-%s (%s)",
		csr.Name, r.node, ip, valid, r.node, made)
	return nil
}

// holders is the record of which node holds which IP: the ConfigMap the
// signer alone writes (packaging/kubernetes/signer.yaml), each key an IP
// and its value the node first signed for it.
func (c *controller) holders(ctx context.Context) (*corev1.ConfigMap, error) {
	cm, err := c.client.CoreV1().ConfigMaps(c.args.namespace).Get(ctx, c.args.holders, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s/%s, the IPs' holders (kubectl apply -k packaging/kubernetes "+
			"makes it): %w", c.args.namespace, c.args.holders, err)
	}
	return cm, nil
}

// initAuth makes an etcd user and role (a node's, the mirror's: `what`)
// as etcd's root (`masqctl cluster init-auth`, idempotent).
// Returns what masqctl says it made, on one line.
func (c *controller) initAuth(ctx context.Context, what string, args []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.args.masqctl, args...).CombinedOutput()
	said := strings.Join(strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", "; ")), " ")
	if err != nil {
		return "", fmt.Errorf("masqctl cluster init-auth for %s: %v: %s", what, err, said)
	}
	if said == "" {
		said = "already there"
	}
	return said, nil
}

// initAuthArgs: `masqctl cluster init-auth` as etcd's root, for what
// follows (a node's NAME=IP, or --netpol-mirror NAME).
func initAuthArgs(a controllerArgs, what ...string) []string {
	return append([]string{"cluster", "init-auth", "--etcd", strings.Join(a.etcd, ","),
		"--ca", a.caCert, "--cert", a.rootCert, "--key", a.rootKey,
		"--prefix", a.prefix, "--operator", a.operator}, what...)
}

// approveAndSign approves the CSR (unless it is already), with reason and
// message, signs it and publishes the certificate; it returns the
// certificate's validity.
func (c *controller) approveAndSign(ctx context.Context, csr *certv1.CertificateSigningRequest, r *request,
	reason, message string) (time.Duration, error) {
	if !approved(csr) {
		csr.Status.Conditions = append(csr.Status.Conditions, certv1.CertificateSigningRequestCondition{
			Type:           certv1.CertificateApproved,
			Status:         corev1.ConditionTrue,
			Reason:         reason,
			Message:        message,
			LastUpdateTime: metav1.Now(),
		})
		got, err := c.client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr,
			metav1.UpdateOptions{})
		if err != nil {
			return 0, fmt.Errorf("approving: %w", err)
		}
		csr = got
	}
	valid := validity(csr.Spec.ExpirationSeconds)
	cert, err := c.ca.sign(r, valid, time.Now())
	if err != nil {
		return 0, fmt.Errorf("signing: %w", err)
	}
	csr.Status.Certificate = cert
	if _, err := c.client.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, csr,
		metav1.UpdateOptions{}); err != nil {
		return 0, fmt.Errorf("publishing the certificate: %w", err)
	}
	return valid, nil
}
