// Package manifest reads Service, EndpointSlice and Node objects from YAML or
// JSON files, so crossproxy can compute and apply state without an API server
// (crossproxy state, render, explain --manifests, run --manifests). Errors name
// the file, the document and, where the decoder knows it, the field.
package manifest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// Set is the objects found in a group of files.
type Set struct {
	Services []*v1.Service
	Slices   []*discovery.EndpointSlice
	Nodes    []*v1.Node
	// Ignored names documents of other kinds, which are skipped ("file#doc Kind").
	Ignored []string
}

// Node returns the Node with the given name, or an error listing the Nodes found.
func (s *Set) Node(name string) (*v1.Node, error) {
	var names []string
	for _, n := range s.Nodes {
		if n.Name == name {
			return n, nil
		}
		names = append(names, n.Name)
	}
	return nil, fmt.Errorf("node %q not found in the manifests (nodes found: %s)", name, strings.Join(names, ", "))
}

var strictDecoder = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// Load reads every path; a directory contributes its *.yaml, *.yml and *.json
// files (not recursively), in name order.
func Load(paths ...string) (*Set, error) {
	files, err := expand(paths)
	if err != nil {
		return nil, err
	}
	set := &Set{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read manifest: %w", err)
		}
		if err := set.add(f, data); err != nil {
			return nil, err
		}
	}
	return set, nil
}

func expand(paths []string) ([]string, error) {
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("manifest path: %w", err)
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, fmt.Errorf("read manifest directory: %w", err)
		}
		var names []string
		for _, e := range entries {
			switch strings.ToLower(filepath.Ext(e.Name())) {
			case ".yaml", ".yml", ".json":
				if !e.IsDir() {
					names = append(names, filepath.Join(p, e.Name()))
				}
			}
		}
		sort.Strings(names)
		files = append(files, names...)
	}
	return files, nil
}

// Parse decodes one file's contents; name is used in errors.
func Parse(name string, data []byte) (*Set, error) {
	set := &Set{}
	if err := set.add(name, data); err != nil {
		return nil, err
	}
	return set, nil
}

func (s *Set) add(file string, data []byte) error {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for doc := 1; ; doc++ {
		raw, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: document %d: %w", file, doc, err)
		}
		if len(bytes.TrimSpace(stripComments(raw))) == 0 {
			doc--
			continue
		}
		if err := s.addDocument(fmt.Sprintf("%s: document %d", file, doc), raw); err != nil {
			return err
		}
	}
}

func (s *Set) addDocument(where string, raw []byte) error {
	var tm metav1.TypeMeta
	jsonData, err := utilyaml.ToJSON(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if err := json.Unmarshal(jsonData, &tm); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if tm.Kind == "" {
		return fmt.Errorf("%s: field kind: missing", where)
	}
	if strings.HasSuffix(tm.Kind, "List") {
		var list v1.List
		if err := json.Unmarshal(jsonData, &list); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		for i, item := range list.Items {
			if err := s.addDocument(fmt.Sprintf("%s: items[%d]", where, i), item.Raw); err != nil {
				return err
			}
		}
		return nil
	}
	switch tm.Kind {
	case "Service", "EndpointSlice", "Node":
	default:
		s.Ignored = append(s.Ignored, fmt.Sprintf("%s %s", where, tm.Kind))
		return nil
	}
	obj, _, err := strictDecoder.Decode(jsonData, nil, nil)
	if err != nil {
		return fmt.Errorf("%s (%s): %w", where, tm.Kind, describe(err))
	}
	switch o := obj.(type) {
	case *v1.Service:
		s.Services = append(s.Services, o)
	case *discovery.EndpointSlice:
		s.Slices = append(s.Slices, o)
	case *v1.Node:
		s.Nodes = append(s.Nodes, o)
	default:
		return fmt.Errorf("%s: kind %s with apiVersion %s is not supported (want v1 Service, discovery.k8s.io/v1 EndpointSlice, v1 Node)", where, tm.Kind, tm.APIVersion)
	}
	return nil
}

// describe makes decoder errors name the field in kubectl's words where possible.
func describe(err error) error {
	if runtime.IsStrictDecodingError(err) {
		return fmt.Errorf("unknown or duplicate field: %w", err)
	}
	return err
}

func stripComments(b []byte) []byte {
	var out [][]byte
	for _, line := range bytes.Split(b, []byte("\n")) {
		t := bytes.TrimSpace(line)
		if len(t) == 0 || t[0] == '#' || string(t) == "---" {
			continue
		}
		out = append(out, line)
	}
	return bytes.Join(out, []byte("\n"))
}
