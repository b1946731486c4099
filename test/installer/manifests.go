// Package installer holds the checks of what installer/ ships: the Kubernetes
// manifests (their invariants here, their acceptance by a real kube-apiserver
// in the integration test), the MSI under Wine and install.ps1. The helpers in
// this file load the manifests the way `make manifests` renders them, so the
// tests see exactly what an operator applies.
package installer

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"sigs.k8s.io/yaml"
)

// TestImage and TestVersion are what the tests substitute for the @IMAGE@ and
// @VERSION@ placeholders, as installer/render.sh does.
const (
	TestImage   = "registry.example/crossproxy:v0.0.0-test"
	TestVersion = "v0.0.0-test"
)

// Document is one YAML document of a manifest file.
type Document struct {
	File string
	Kind string
	Name string
	Raw  []byte
}

// rootModule is the module path of the repository's top go.mod.
const rootModule = "github.com/crossproxy/crossproxy"

// RepoRoot is the repository's top directory: the nearest directory at or
// above the working directory (go test runs a test in its package's
// directory) whose go.mod is the root module's. It is not taken from this
// source file's path, which -trimpath (as installer/test.sh builds the
// tests, to share vet's compiles) turns into a module path; that path is
// only the fallback for a test binary run from elsewhere.
func RepoRoot() string {
	if dir, err := os.Getwd(); err == nil {
		for {
			if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && modulePath(data) == rootModule {
				return dir
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// modulePath is the path on a go.mod file's module line, or "".
func modulePath(gomod []byte) string {
	for _, line := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}

// ManifestFiles lists the Kubernetes manifests installer/ ships, per OS, in the
// order render.sh concatenates them.
func ManifestFiles() map[string][]string {
	root := filepath.Join(RepoRoot(), "installer")
	return map[string][]string{
		"linux": {
			filepath.Join(root, "linux", "rbac.yaml"),
			filepath.Join(root, "linux", "configmap.yaml"),
			filepath.Join(root, "linux", "daemonset.yaml"),
		},
		"windows": {
			filepath.Join(root, "linux", "rbac.yaml"),
			filepath.Join(root, "windows", "configmap.yaml"),
			filepath.Join(root, "windows", "daemonset.yaml"),
		},
	}
}

// Render substitutes the placeholders the way installer/render.sh does.
func Render(data []byte) []byte {
	data = bytes.ReplaceAll(data, []byte("@IMAGE@"), []byte(TestImage))
	return bytes.ReplaceAll(data, []byte("@VERSION@"), []byte(TestVersion))
}

// LoadDocuments reads the files, renders them and splits them into documents,
// each with its kind and name; a document without either is an error.
func LoadDocuments(files []string) ([]Document, error) {
	var docs []Document
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read manifest: %w", err)
		}
		for i, part := range splitYAML(Render(data)) {
			var meta struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal(part, &meta); err != nil {
				return nil, fmt.Errorf("%s document %d: %w", f, i, err)
			}
			if meta.Kind == "" || meta.Metadata.Name == "" {
				return nil, fmt.Errorf("%s document %d: no kind or metadata.name", f, i)
			}
			docs = append(docs, Document{File: f, Kind: meta.Kind, Name: meta.Metadata.Name, Raw: part})
		}
	}
	return docs, nil
}

// splitYAML splits a multi-document YAML stream on "---" lines, dropping
// documents that hold only comments or nothing.
func splitYAML(data []byte) [][]byte {
	var out [][]byte
	for _, part := range strings.Split("\n"+string(data), "\n---") {
		keep := false
		for _, line := range strings.Split(part, "\n") {
			t := strings.TrimSpace(line)
			if t != "" && !strings.HasPrefix(t, "#") {
				keep = true
				break
			}
		}
		if keep {
			out = append(out, []byte(strings.TrimPrefix(part, "\n")))
		}
	}
	return out
}
