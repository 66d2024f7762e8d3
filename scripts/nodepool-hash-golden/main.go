// Command nodepool-hash-golden prints Karpenter's own karpenter.sh/nodepool-hash for each NodePool
// manifest in a directory, as JSON {"<file name>": "<hash>"}: the golden values karpy's hash is
// tested against (tests/api/test_nodepool_hash.py). Run by scripts/gen-hash-golden
// inside Karpenter's module, so the types and the hash are Karpenter's, unchanged.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: nodepool-hash-golden DIR")
		os.Exit(2)
	}
	paths, err := filepath.Glob(filepath.Join(os.Args[1], "*.yaml"))
	if err != nil {
		panic(err)
	}
	sort.Strings(paths)
	hashes := map[string]string{}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			panic(err)
		}
		nodePool := &v1.NodePool{}
		// As the API server's JSON reaches Karpenter: YAML to JSON, then Go's decoding.
		if err := yaml.UnmarshalStrict(data, nodePool); err != nil {
			panic(fmt.Errorf("%s: %w", path, err))
		}
		hashes[strings.TrimSuffix(filepath.Base(path), ".yaml")] = nodePool.Hash()
	}
	out, err := json.MarshalIndent(map[string]any{"nodePoolHashVersion": v1.NodePoolHashVersion, "hashes": hashes}, "", "  ")
	if err != nil {
		panic(err)
	}
	fmt.Println(string(out))
}
