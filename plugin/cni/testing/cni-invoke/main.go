// cni-invoke: runs CNI plugins the way container runtimes do, through the
// reference libcni (Debian's golang-github-appc-cni-dev, v1.1.2), for the
// fabric-cni integration test. Built offline with GO111MODULE=off against
// /usr/share/gocode.
//
//	cni-invoke chain   -conf LIST.conflist -cmd ADD|CHECK|DEL -netns P -cid ID [-ifname eth0] [-args K=V;..] -cache DIR -path DIRS
//	    libcni AddNetworkList / CheckNetworkList / DelNetworkList (containerd/CRI-O's path).
//	cni-invoke raw     -plugin NAME -conf STDIN.json -cmd CMD [-netns P] [-cid ID] [-ifname I] [-args ..] -path DIRS
//	    invoke.RawExec with invoke.Args.AsEnv(): the exact exec libcni does for one plugin. Used for
//	    STATUS/GC (libcni only gained them in v1.2.0, which builds the same env and stdin), for
//	    cniVersion 1.1.0 results (unknown to libcni 1.1.2's result parser) and for malformed input.
//	cni-invoke version -plugin NAME -path DIRS
//	    libcni GetVersionInfo.
//
// Output: the result (or nothing) on stdout, exit 0; a CNI error object on
// stdout, exit 1; any other failure on stderr, exit 3.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
)

func fail(err error) {
	// libcni wraps plugin errors ("plugin type=... failed (add): %w").
	var e *types.Error
	if errors.As(err, &e) {
		fmt.Fprintln(os.Stderr, "cni-invoke:", err)
		out, _ := json.Marshal(e)
		os.Stdout.Write(out)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "cni-invoke:", err)
	os.Exit(3)
}

func parseArgs(s string) [][2]string {
	var out [][2]string
	for _, kv := range strings.Split(s, ";") {
		if kv == "" {
			continue
		}
		parts := strings.SplitN(kv, "=", 2)
		if len(parts) == 2 {
			out = append(out, [2]string{parts[0], parts[1]})
		}
	}
	return out
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: cni-invoke chain|raw|version [flags]")
		os.Exit(2)
	}
	mode := os.Args[1]
	fs := flag.NewFlagSet(mode, flag.ExitOnError)
	conf := fs.String("conf", "", "conflist (chain) or stdin (raw) file")
	cmd := fs.String("cmd", "ADD", "CNI command")
	netns := fs.String("netns", "", "CNI_NETNS")
	cid := fs.String("cid", "", "CNI_CONTAINERID")
	ifname := fs.String("ifname", "eth0", "CNI_IFNAME")
	args := fs.String("args", "", "CNI_ARGS, K=V;K=V")
	cache := fs.String("cache", "", "libcni cache dir")
	path := fs.String("path", "", "CNI_PATH")
	plugin := fs.String("plugin", "", "plugin name (raw, version)")
	fs.Parse(os.Args[2:])

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	paths := strings.Split(*path, ":")
	cfg := libcni.NewCNIConfigWithCacheDir(paths, *cache, nil)

	switch mode {
	case "chain":
		list, err := libcni.ConfListFromFile(*conf)
		if err != nil {
			fail(err)
		}
		rt := &libcni.RuntimeConf{ContainerID: *cid, NetNS: *netns, IfName: *ifname, Args: parseArgs(*args)}
		switch *cmd {
		case "ADD":
			res, err := cfg.AddNetworkList(ctx, list, rt)
			if err != nil {
				fail(err)
			}
			out, err := json.Marshal(res)
			if err != nil {
				fail(err)
			}
			os.Stdout.Write(out)
		case "CHECK":
			if err := cfg.CheckNetworkList(ctx, list, rt); err != nil {
				fail(err)
			}
		case "DEL":
			if err := cfg.DelNetworkList(ctx, list, rt); err != nil {
				fail(err)
			}
		default:
			fail(fmt.Errorf("chain supports ADD, CHECK, DEL, not %q", *cmd))
		}
	case "raw":
		stdin, err := os.ReadFile(*conf)
		if err != nil {
			fail(err)
		}
		pluginPath, err := invoke.FindInPath(*plugin, paths)
		if err != nil {
			fail(err)
		}
		env := (&invoke.Args{Command: *cmd, ContainerID: *cid, NetNS: *netns,
			PluginArgsStr: *args, IfName: *ifname, Path: *path}).AsEnv()
		out, err := (&invoke.RawExec{Stderr: os.Stderr}).ExecPlugin(ctx, pluginPath, stdin, env)
		if err != nil {
			fail(err)
		}
		os.Stdout.Write(out)
	case "version":
		info, err := cfg.GetVersionInfo(ctx, *plugin)
		if err != nil {
			fail(err)
		}
		out, _ := json.Marshal(map[string]interface{}{"supportedVersions": info.SupportedVersions()})
		os.Stdout.Write(out)
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", mode)
		os.Exit(2)
	}
}
