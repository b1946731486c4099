//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

func ptr[T any](v T) *T { return &v }

// sample is one demo Service with the pods behind it.
type sample struct {
	svc   *v1.Service
	pods  []*pod
	hints bool   // give each endpoint a forZones hint of its own zone
	port  string // slice port name; differs from the Service port name in the broken sample
	what  string // one line for the person watching
}

const managedBy = "xpd-demo"

func service(name, ip4, ip6 string, mods ...func(*v1.Service)) *v1.Service {
	s := &v1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  ip4,
			ClusterIPs: []string{ip4},
			IPFamilies: []v1.IPFamily{v1.IPv4Protocol},
			Selector:   map[string]string{"app": name},
			Ports:      []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if ip6 != "" {
		s.Spec.ClusterIPs = append(s.Spec.ClusterIPs, ip6)
		s.Spec.IPFamilies = append(s.Spec.IPFamilies, v1.IPv6Protocol)
		s.Spec.IPFamilyPolicy = ptr(v1.IPFamilyPolicyRequireDualStack)
	}
	for _, m := range mods {
		m(s)
	}
	return s
}

func nodePort(port int32, policy v1.ServiceExternalTrafficPolicy) func(*v1.Service) {
	return func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = port
		s.Spec.ExternalTrafficPolicy = policy
	}
}

// samples are the Services the demo applies, in the order it shows them.
func samples() []*sample {
	return []*sample{
		{svc: service("web", "10.96.0.10", "", nodePort(30080, v1.ServiceExternalTrafficPolicyCluster)), pods: []*pod{podA1, podB1},
			what: "NodePort, externalTrafficPolicy Cluster: any node answers; the source is masqueraded"},
		{svc: service("web-local", "10.96.0.11", "", nodePort(30081, v1.ServiceExternalTrafficPolicyLocal)), pods: []*pod{podA2},
			what: "NodePort, externalTrafficPolicy Local: only node a has an endpoint; the pod sees the real client"},
		{svc: service("web-dual", "10.96.0.12", "fd00:10:96::12"), pods: []*pod{podB2},
			what: "dual-stack ClusterIP (IPv4 and IPv6)"},
		{svc: service("web-sticky", "10.96.0.13", "", func(s *v1.Service) {
			s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr[int32](600)}}
		}), pods: []*pod{podA1, podA2, podB1, podB2},
			what: "sessionAffinity ClientIP: one client keeps its pod"},
		{svc: service("web-zonal", "10.96.0.14", "", func(s *v1.Service) {
			s.Spec.TrafficDistribution = ptr(v1.ServiceTrafficDistributionPreferSameZone)
		}), pods: []*pod{podA1, podB1}, hints: true,
			what: "trafficDistribution PreferSameZone: clients stay in their zone"},
		{svc: service("web-broken", "10.96.0.15", "", func(s *v1.Service) {
			s.Spec.Ports[0].TargetPort = intstr.FromString("http")
		}), pods: []*pod{podA1, podB1}, port: "web",
			what: "broken: targetPort \"http\" but the slice publishes a port named \"web\""},
	}
}

// slices returns the EndpointSlices the demo writes for a sample (there is
// no controller-manager): one per family of the Service.
func (s *sample) slices() []*discovery.EndpointSlice {
	portName := s.svc.Spec.Ports[0].Name
	if s.port != "" {
		portName = s.port
	}
	var out []*discovery.EndpointSlice
	for _, fam := range s.svc.Spec.IPFamilies {
		at, suffix := discovery.AddressTypeIPv4, "v4"
		if fam == v1.IPv6Protocol {
			at, suffix = discovery.AddressTypeIPv6, "v6"
		}
		es := &discovery.EndpointSlice{
			TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: s.svc.Name + "-" + suffix,
				Labels: map[string]string{discovery.LabelServiceName: s.svc.Name, discovery.LabelManagedBy: managedBy}},
			AddressType: at,
			Ports:       []discovery.EndpointPort{{Name: ptr(portName), Port: ptr[int32](8080), Protocol: ptr(v1.ProtocolTCP)}},
		}
		for _, p := range s.pods {
			addr := p.V4
			if fam == v1.IPv6Protocol {
				addr = p.V6
			}
			ep := discovery.Endpoint{Addresses: []string{addr}, NodeName: ptr(p.Node.Name), Zone: ptr(p.Node.Zone),
				Conditions: discovery.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
				TargetRef:  &v1.ObjectReference{Kind: "Pod", Namespace: "default", Name: p.Name}}
			if s.hints {
				ep.Hints = &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: p.Node.Zone}}}
			}
			es.Endpoints = append(es.Endpoints, ep)
		}
		out = append(out, es)
	}
	return out
}

// nodeObject is the Node of a lab node: zone label, addresses, pod CIDRs.
func nodeObject(n *node) *v1.Node {
	return &v1.Node{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{
			v1.LabelTopologyZone: n.Zone, v1.LabelHostname: n.Name, v1.LabelOSStable: "linux"}},
		Spec: v1.NodeSpec{PodCIDR: n.PodV4, PodCIDRs: []string{n.PodV4, n.PodV6}},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: n.V4}, {Type: v1.NodeInternalIP, Address: n.V6},
			{Type: v1.NodeHostName, Address: n.Name}}},
	}
}

// apply creates the Nodes, Services and EndpointSlices through the API server.
func apply(ctx context.Context, c kubernetes.Interface, list []*sample) error {
	for _, n := range nodes {
		obj := nodeObject(n)
		created, err := c.CoreV1().Nodes().Create(ctx, obj, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create node %s: %w", n.Name, err)
		}
		created.Status = obj.Status
		if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update status of node %s: %w", n.Name, err)
		}
	}
	for _, s := range list {
		if _, err := c.CoreV1().Services("default").Create(ctx, s.svc, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create service %s: %w", s.svc.Name, err)
		}
		for _, es := range s.slices() {
			if _, err := c.DiscoveryV1().EndpointSlices("default").Create(ctx, es, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create endpointslice %s: %w", es.Name, err)
			}
		}
	}
	return nil
}

// applyRBAC creates the ServiceAccount, ClusterRole, ClusterRoleBinding,
// Role and RoleBinding that installer/linux/rbac.yaml ships, so the proxies run with exactly the
// rights a real installation grants them.
func applyRBAC(ctx context.Context, c kubernetes.Interface, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read RBAC manifest: %w", err)
	}
	data = bytes.ReplaceAll(data, []byte("@VERSION@"), []byte("demo"))
	if _, err := c.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace kube-system: %w", err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s document %d: %w", path, i, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return fmt.Errorf("%s document %d: %w", path, i, err)
		}
		switch o := obj.(type) {
		case *v1.ServiceAccount:
			_, err = c.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = c.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = c.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = c.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			err = fmt.Errorf("unexpected kind %T", obj)
		}
		if err != nil {
			return fmt.Errorf("%s document %d: %w", path, i, err)
		}
	}
}

// stripComments drops YAML comment lines.
func stripComments(doc []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(append(out, line...), '\n')
		}
	}
	return out
}

// writeManifests writes the same objects as YAML files for standalone mode.
func writeManifests(dir string, list []*sample) error {
	var docs []string
	add := func(o any) error {
		b, err := yaml.Marshal(o)
		if err != nil {
			return fmt.Errorf("encode manifest: %w", err)
		}
		docs = append(docs, string(b))
		return nil
	}
	for _, n := range nodes {
		if err := add(nodeObject(n)); err != nil {
			return err
		}
	}
	for _, s := range list {
		if err := add(s.svc); err != nil {
			return err
		}
		for _, es := range s.slices() {
			if err := add(es); err != nil {
				return err
			}
		}
	}
	path := filepath.Join(dir, "objects.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
