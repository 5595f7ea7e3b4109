"""Partners' webhooks (A2A push notifications, spec §13.2): a URL a partner gives is read as a
fetching client reads it (WHATWG rules, pools.models.read_url), and every address its host
leads to must be public — unless the operator allowed networks for that partner
(Agent.push_networks). It is checked when the partner registers it and again at each POST,
whose connection goes to the very address checked: no second DNS answer in between."""

import ipaddress
import json
import socket

import ada_url
import httpx
from django.core.exceptions import ValidationError

from pools.models import read_url

TIMEOUT = httpx.Timeout(10.0, connect=5.0)  # the specification recommends 10 to 30 s
CONTENT_TYPE = "application/a2a+json"


class Refused(Exception):
    """A webhook URL this host will not POST to; the message says why."""


def networks(text):
    """The networks an operator allowed (CIDRs or addresses, by lines or commas)."""
    return [
        ipaddress.ip_network(item, strict=False) for item in text.replace(",", "\n").split() if item
    ]


def validate_networks(text):
    try:
        networks(text)
    except ValueError as exc:
        raise ValidationError(f"Not a network: {exc}") from None


# IPv6 addresses that carry an IPv4 one, which a translator, a tunnel or the kernel reaches:
# Python counts most of them global whatever they carry (127.0.0.1 through NAT64, 6to4…).
NAT64 = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052: the IPv4 address in the last 32 bits
COMPATIBLE = ipaddress.ip_network("::/96")  # RFC 4291's deprecated IPv4-compatible addresses
LOCAL_NAT64 = ipaddress.ip_network("64:ff9b:1::/48")  # RFC 8215: where it sits is local


def carried_ipv4(address):
    """The IPv4 address an IPv6 one leads to (mapped, compatible, 6to4, Teredo's client,
    NAT64), or None."""
    if address.version == 4:
        return None
    if address.ipv4_mapped or address.sixtofour:
        return address.ipv4_mapped or address.sixtofour
    if address.teredo:
        return address.teredo[1]
    if address in NAT64 or address in COMPATIBLE:
        return ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
    return None


def allowed(address, allowed_networks):
    address = carried_ipv4(address) or address
    if any(address in network for network in allowed_networks):
        return True
    return address.is_global and not address.is_multicast and address not in LOCAL_NAT64


def _addresses(host, port):
    literal = host.strip("[]")
    try:
        return [ipaddress.ip_address(literal)]
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise Refused(f"Its host {host} does not resolve.") from None
    return list(dict.fromkeys(ipaddress.ip_address(item[4][0].split("%")[0]) for item in found))


def target(url, allowed_networks):
    """(the URL to connect to, its Host header, the host name for TLS) for `url`, or Refused."""
    if not isinstance(url, str) or len(url) > 2048:
        raise Refused("Give an http or https URL of at most 2048 characters.")
    read = read_url(url)
    if read is None or not url.lower().lstrip().startswith(("http:", "https:")):
        raise Refused("Give an http or https URL.")
    host, ambiguity = read
    if ambiguity:
        raise Refused(f"This URL cannot be used: {ambiguity}.")
    parsed = ada_url.URL(url)
    scheme = parsed.protocol.rstrip(":")
    port = int(parsed.port or (443 if scheme == "https" else 80))
    addresses = _addresses(parsed.hostname, port)
    refused = [str(a) for a in addresses if not allowed(a, allowed_networks)]
    if refused or not addresses:
        raise Refused(
            f"Its host {host} is at {', '.join(refused) or 'no address'}, not a public address "
            "(private, loopback and link-local addresses are refused unless this host's "
            "operator allowed them for you)."
        )
    address = addresses[0]
    literal = f"[{address}]" if address.version == 6 else str(address)
    pinned = f"{scheme}://{literal}:{port}{parsed.pathname}{parsed.search}"
    return pinned, parsed.host, parsed.hostname


def post(url, allowed_networks, event, headers):
    """POST one StreamResponse to `url`: the HTTP status, or Refused, or an httpx.HTTPError.
    No redirect is followed: a 3xx is not a delivery."""
    pinned, host_header, hostname = target(url, allowed_networks)
    with httpx.Client(timeout=TIMEOUT, follow_redirects=False) as client:
        response = client.post(
            pinned,
            content=json.dumps(event, ensure_ascii=False).encode(),
            headers={**headers, "Host": host_header, "Content-Type": CONTENT_TYPE},
            extensions={"sni_hostname": hostname} if pinned.startswith("https") else {},
        )
    return response.status_code
