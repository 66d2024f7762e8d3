// Checks Grafana dashboard JSON files against Grafana's dashboard schema (the Go types the
// grafana-foundation-sdk generates from Grafana's dashboard kind): each file is decoded strictly,
// which fails on a required field absent, a field of the wrong type or a field the schema does
// not have, and then validated. Prints one line per file; exits 1 if any fails.
package main

import (
	"fmt"
	"os"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// real drops the empty error list the generated code can return for a valid input (a nil slice
// in a non-nil interface).
func real(err error) error {
	if errs, ok := err.(cog.BuildErrors); ok && len(errs) == 0 {
		return nil
	}
	return err
}

func main() {
	failed := false
	for _, path := range os.Args[1:] {
		raw, err := os.ReadFile(path)
		if err == nil {
			var board dashboard.Dashboard
			err = real(board.UnmarshalJSONStrict(raw))
			if err == nil {
				err = real(board.Validate())
			}
		}
		if err != nil {
			failed = true
			fmt.Printf("FAIL %s: %v\n", path, err)
		} else {
			fmt.Printf("ok %s\n", path)
		}
	}
	if failed {
		os.Exit(1)
	}
}
