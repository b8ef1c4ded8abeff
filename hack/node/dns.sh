# shellcheck shell=bash
# hack/node.sh's pod DNS: dnsmasq in the DNS network namespace (cluster.local only, never forwards), fed by
# hack/dns_watcher.py, which also keeps the Service nat chain. Sourced by hack/node.sh; sets no shell options.

start_dns() {
    mkdir -p "$NODE/dns/hosts"
    : >"$NODE/resolv.conf"
    # The pod resolver answers only cluster.local names from the watcher's hosts file and never forwards anywhere.
    start_bg dnsmasq ip netns exec "$DNS_NS" dnsmasq --keep-in-foreground --no-resolv --no-hosts --no-poll \
        --hostsdir="$NODE/dns/hosts" --local=/cluster.local/ --domain-needed --bogus-priv \
        --listen-address="$DNS_IP" --bind-interfaces --user=root --pid-file= --log-facility=-
    local server
    server=$(cat "$STATE/server")
    start_bg dns-watcher "$VENV/bin/python" "$ROOT/hack/dns_watcher.py" --kubeconfig "$STATE/kubeconfig" \
        --hosts-dir "$NODE/dns/hosts" --work-dir "$NODE/dns" --service-chain "$SVC_CHAIN" --apiserver "${server#https://}"
}
