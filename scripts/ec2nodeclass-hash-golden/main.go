// Command ec2nodeclass-hash-golden prints the AWS provider's own karpenter.k8s.aws/ec2nodeclass-hash
// for each EC2NodeClass manifest in a directory, as JSON: EC2NodeClass.Hash(nil) (no cluster CA
// bundle) under "hashes", and EC2NodeClass.Hash(&caBundle) under "hashesWithCABundle": the golden
// values karpy's hash is tested against. Run by scripts/gen-hash-golden
// inside the provider's module, so the types and the hash are the provider's, unchanged.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	v1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
)

// A cluster CA bundle as the provider is given one (base64 of a PEM certificate).
const caBundle = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo="

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: ec2nodeclass-hash-golden DIR")
		os.Exit(2)
	}
	paths, err := filepath.Glob(filepath.Join(os.Args[1], "*.yaml"))
	if err != nil {
		panic(err)
	}
	sort.Strings(paths)
	hashes, withCABundle := map[string]string{}, map[string]string{}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			panic(err)
		}
		nodeClass := &v1.EC2NodeClass{}
		if err := yaml.UnmarshalStrict(data, nodeClass); err != nil {
			panic(fmt.Errorf("%s: %w", path, err))
		}
		name := strings.TrimSuffix(filepath.Base(path), ".yaml")
		hashes[name] = nodeClass.Hash(nil)
		bundle := caBundle
		withCABundle[name] = nodeClass.Hash(&bundle)
	}
	out, err := json.MarshalIndent(map[string]any{
		"ec2NodeClassHashVersion": v1.EC2NodeClassHashVersion,
		"hashes":                  hashes,
		"caBundle":                caBundle,
		"hashesWithCABundle":      withCABundle,
	}, "", "  ")
	if err != nil {
		panic(err)
	}
	fmt.Println(string(out))
}
