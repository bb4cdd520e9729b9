// check-manifests: masq's Kubernetes deploy files checked offline, as the
// API server would take them. Each kustomization directory given is built
// with kustomize (its resources, namespace and image transformers), and
// every object it renders is decoded by Kubernetes' own serializer in
// strict mode (client-go's scheme: an unknown or duplicate field, a value
// of the wrong type or an unknown kind is an error, as `kubectl apply
// --validate=strict` reports them). A Multus NetworkAttachmentDefinition
// (no scheme ships it) is decoded into its three fields, and its CNI
// configuration is parsed by libcni, the library runtimes load it with;
// each pod's networks annotation naming a NAD of the same files is run
// through that NAD's chain as Multus runs it (multus.go), so a chain that
// gives masq-cni no address fails here.
//
// usage: check-manifests DIR...   exit 0 if every object is good, else 1
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/containernetworking/cni/libcni"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// networkAttachmentDefinition is Multus' k8s.cni.cncf.io/v1 kind: its
// whole schema is metadata and spec.config (a CNI configuration as text).
type networkAttachmentDefinition struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Config string `json:"config"`
	} `json:"spec"`
}

var strict = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
	kjson.SerializerOptions{Yaml: true, Strict: true})

func checkObject(doc []byte) (string, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return "?", err
	}
	what := fmt.Sprintf("%s %s/%s", head.Kind, head.Metadata.Namespace, head.Metadata.Name)
	if head.APIVersion == "k8s.cni.cncf.io/v1" && head.Kind == "NetworkAttachmentDefinition" {
		var nad networkAttachmentDefinition
		if err := yaml.UnmarshalStrict(doc, &nad); err != nil {
			return what, err
		}
		conf, err := libcni.ConfListFromBytes([]byte(nad.Spec.Config))
		if err != nil {
			return what, fmt.Errorf("spec.config: %w", err)
		}
		if conf.Name != nad.Metadata.Name {
			return what, fmt.Errorf("spec.config: network %q, not the object's name %q", conf.Name, nad.Metadata.Name)
		}
		return what, nil
	}
	// Strict decoding into the registered type: unknown fields and wrong
	// types are errors (the JSON form, which is what the API server gets).
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return what, err
	}
	obj, _, err := strict.Decode(j, nil, nil)
	if err != nil {
		return what, err
	}
	if _, ok := obj.(runtime.Object); !ok {
		return what, fmt.Errorf("not a Kubernetes object")
	}
	if ds, ok := obj.(*appsv1.DaemonSet); ok {
		if err := checkHostPaths(ds.Spec.Template.Spec.Volumes); err != nil {
			return what, err
		}
		return what, checkTokens(ds.Spec.Template.Spec)
	}
	return what, nil
}

// checkTokens: the node's pod runs masqd privileged and masq-nri beside
// it; neither may hold a service-account token (a compromised one would
// act as the cluster's masqd account). Only an init container, masq-signer
// join, may mount a projected token, and none is mounted by default.
func checkTokens(spec corev1.PodSpec) error {
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		return fmt.Errorf("automountServiceAccountToken is not false: every container gets a token")
	}
	tokens := map[string]bool{}
	for _, v := range spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.ServiceAccountToken != nil {
				tokens[v.Name] = true
			}
		}
	}
	for _, c := range spec.Containers {
		for _, m := range c.VolumeMounts {
			if tokens[m.Name] {
				return fmt.Errorf("container %s mounts %s, a service-account token: only an init container may", c.Name, m.Name)
			}
		}
	}
	return nil
}

// checkHostPaths: a DaemonSet runs on nodes as they come; a hostPath that
// must already exist (Directory, File, Socket...) and that the node's own
// kernel does not provide (/dev, /sys, /proc) is one a node may lack (its
// PKI not provisioned yet, a runtime with NRI off), and the pod would sit
// in FailedMount there, masqd with it, until someone makes it. Such a
// path is DirectoryOrCreate (or FileOrCreate), and the program using it
// says what is missing.
func checkHostPaths(volumes []corev1.Volume) error {
	var bad []string
	for _, v := range volumes {
		hp := v.HostPath
		if hp == nil || hp.Type == nil {
			continue
		}
		switch *hp.Type {
		case corev1.HostPathDirectoryOrCreate, corev1.HostPathFileOrCreate, corev1.HostPathUnset:
			continue
		}
		kernel := false
		for _, p := range []string{"/dev/", "/sys/", "/proc/"} {
			kernel = kernel || strings.HasPrefix(hp.Path+"/", p)
		}
		if !kernel {
			bad = append(bad, fmt.Sprintf("volume %s: hostPath %s of type %s: a node without it "+
				"keeps the pod in FailedMount; use %sOrCreate and have the program say what is missing",
				v.Name, hp.Path, *hp.Type, strings.TrimSuffix(string(*hp.Type), "OrCreate")))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s", strings.Join(bad, "; "))
	}
	return nil
}

func checkDir(dir string) (int, []string) {
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return 0, []string{fmt.Sprintf("%s: kustomize: %v", dir, err)}
	}
	var bad []string
	nads := map[string]string{}
	var pods []*unstructured.Unstructured
	for _, r := range res.Resources() {
		m, err := r.Map()
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v", dir, err))
			continue
		}
		doc, err := json.Marshal(m)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v", dir, err))
			continue
		}
		if what, err := checkObject(doc); err != nil {
			bad = append(bad, fmt.Sprintf("%s: %s: %v", dir, what, err))
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		switch u.GetKind() {
		case "NetworkAttachmentDefinition":
			config, _, _ := unstructured.NestedString(m, "spec", "config")
			nads[u.GetNamespace()+"/"+u.GetName()] = config
		case "Pod":
			pods = append(pods, u)
		}
	}
	for _, pod := range pods {
		bad = append(bad, checkAttachments(dir, pod, nads)...)
	}
	return len(res.Resources()), bad
}

// checkAttachments runs, as Multus would, the chain of each of the pod's
// networks that the same files define (multus.go).
func checkAttachments(dir string, pod *unstructured.Unstructured, nads map[string]string) []string {
	what := fmt.Sprintf("%s: Pod %s/%s", dir, pod.GetNamespace(), pod.GetName())
	text, ok := pod.GetAnnotations()["k8s.v1.cni.cncf.io/networks"]
	if !ok {
		return nil
	}
	var nets []podNetwork
	if strings.HasPrefix(strings.TrimSpace(text), "[") {
		if err := json.Unmarshal([]byte(text), &nets); err != nil {
			return []string{fmt.Sprintf("%s: k8s.v1.cni.cncf.io/networks: %v", what, err)}
		}
	} else {
		// The short form: [namespace/]name[@interface], comma-separated.
		for _, n := range strings.Split(text, ",") {
			name, ifname, _ := strings.Cut(strings.TrimSpace(n), "@")
			ns, name, found := strings.Cut(name, "/")
			if !found {
				ns, name = "", ns
			}
			nets = append(nets, podNetwork{Name: name, Namespace: ns, Interface: ifname})
		}
	}
	var bad []string
	for i, n := range nets {
		ns := n.Namespace
		if ns == "" {
			ns = pod.GetNamespace()
		}
		config, ok := nads[ns+"/"+n.Name]
		if !ok {
			continue // defined elsewhere
		}
		if n.Interface == "" {
			n.Interface = fmt.Sprintf("net%d", i+1)
		}
		if err := attach(config, pod.GetNamespace(), pod.GetName(), n); err != nil {
			bad = append(bad, fmt.Sprintf("%s: network %s/%s as Multus attaches it: %v", what, ns, n.Name, err))
		}
	}
	return bad
}

func main() {
	if len(os.Args) < 2 || strings.HasPrefix(os.Args[1], "-") {
		fmt.Fprintln(os.Stderr, "usage: check-manifests KUSTOMIZATION_DIR...")
		os.Exit(2)
	}
	failed := false
	for _, dir := range os.Args[1:] {
		n, bad := checkDir(dir)
		for _, b := range bad {
			fmt.Fprintln(os.Stderr, "check-manifests: "+b)
		}
		if len(bad) > 0 {
			failed = true
			continue
		}
		fmt.Printf("%s: %d objects good\n", dir, n)
	}
	if failed {
		os.Exit(1)
	}
}
