#!/bin/bash
# The pod network of the kind nodes that hack/kind-node.sh builds: a small stand-in for kindnetd
# (its module is not served by the Go module proxy), run by kind's own kindnet DaemonSet
# (hostNetwork, NET_ADMIN, /etc/cni/net.d of the node), as /bin/kindnetd of the image
# docker.io/kindest/kindnetd:<kind's tag>.
# Every 5 s it lists the Nodes (the DaemonSet's service account may list them) and
#   - for its own node (InternalIP = HOST_IP) writes /etc/cni/net.d/10-kindnet.conflist:
#     ptp + host-local IPAM for the node's spec.podCIDR + portmap (the plugins are in the node's
#     /opt/cni/bin);
#   - for every other node routes that node's podCIDR via its InternalIP.
# IPv4 only, no masquerading (the nodes share one bridge; nothing leaves it), no NetworkPolicy.
set -u
SA=/var/run/secrets/kubernetes.io/serviceaccount
API=https://${KUBERNETES_SERVICE_HOST}:${KUBERNETES_SERVICE_PORT}
CONF=/etc/cni/net.d/10-kindnet.conflist
: "${HOST_IP:?HOST_IP is not set}"

log() { echo "$(date -u +%FT%TZ) kindnet: $*"; }

write_conf() {
  local cidr=$1 tmp
  tmp=$(mktemp /etc/cni/net.d/.kindnet.XXXXXX)
  cat >"$tmp" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "kindnet",
  "plugins": [
    {
      "type": "ptp",
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "dataDir": "/run/cni-ipam-state",
        "routes": [{"dst": "0.0.0.0/0"}],
        "ranges": [[{"subnet": "$cidr"}]]
      },
      "mtu": 1500
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  chmod 0644 "$tmp"
  mv "$tmp" "$CONF"
}

log "starting on $HOST_IP (pod subnet ${POD_SUBNET:-?})"
declare -A routed
own=
while true; do
  if nodes=$(curl -sf --max-time 10 --cacert "$SA/ca.crt" -H "Authorization: Bearer $(cat "$SA/token")" "$API/api/v1/nodes" \
      | jq -r '.items[] | [.metadata.name, (.spec.podCIDR // ""),
               ([.status.addresses[]? | select(.type == "InternalIP") | .address | select(test("^[0-9.]+$"))][0] // "")] | @tsv'); then
    while IFS=$'\t' read -r name cidr ip; do
      if [ -z "$cidr" ] || [ -z "$ip" ]; then continue; fi
      if [ "$ip" = "$HOST_IP" ]; then
        if [ "$own" != "$cidr" ] || [ ! -s "$CONF" ]; then
          write_conf "$cidr" && own=$cidr && log "wrote $CONF for $name ($cidr)"
        fi
      elif [ "${routed[$cidr]:-}" != "$ip" ] || ! ip route show "$cidr" | grep -q "via $ip"; then
        ip route replace "$cidr" via "$ip" && routed[$cidr]=$ip && log "route $cidr via $ip ($name)"
      fi
    done <<<"$nodes"
  else
    log "could not list the nodes at $API"
  fi
  sleep 5
done
