package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/brokerswitch/brokerswitch/metrics"
)

// version and revision are set at link time (-ldflags "-X main.version=... -X
// main.revision=..."), by `make build` and the Dockerfile. They are the only package-level
// variables of the binary because -X can set nothing else; read them through buildInfo.
var (
	version  string
	revision string
)

// buildInfo says which build this binary is: the stamped version, else the module
// version Go derived from the VCS tag; the stamped revision, else the commit Go's VCS
// stamping recorded (marked "-dirty" for a modified tree); and the Go version.
func buildInfo() metrics.BuildInfo {
	info := metrics.BuildInfo{Version: version, Revision: revision, GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return withUnknowns(info)
	}
	info.GoVersion = bi.GoVersion
	if info.Version == "" && bi.Main.Version != "(devel)" {
		info.Version = bi.Main.Version
	}
	if info.Revision == "" {
		var rev string
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if rev != "" && modified {
			rev += "-dirty"
		}
		info.Revision = rev
	}
	return withUnknowns(info)
}

func withUnknowns(info metrics.BuildInfo) metrics.BuildInfo {
	if info.Version == "" {
		info.Version = "dev"
	}
	if info.Revision == "" {
		info.Revision = "unknown"
	}
	return info
}

func printVersion(w io.Writer, info metrics.BuildInfo) error {
	_, err := fmt.Fprintf(w, "brokerswitch %s\ncommit: %s\ngo: %s\n", info.Version, info.Revision, info.GoVersion)
	return err
}
