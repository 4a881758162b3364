// packet-cost-flood DST PORT COUNT [FLOWS]: COUNT UDP datagrams (18 bytes of payload) to DST:PORT from FLOWS sockets
// (one source port each), in batches of 64 with sendmmsg. Unconnected, so ICMP errors are ignored. FLOWS 0: every
// datagram a new flow (a raw socket writes the headers: the source port walks 1024..65535, then the destination's last
// octet DST+1, DST+2, ...; about 4 million flows before one comes again). FLOWS -1: the same raw socket, TCP: every 4
// packets a new 4-tuple (walking as above) and the client's side of a short connection, SYN, ACK, FIN|ACK, ACK (bare
// 40-byte segments: no payload, checksum left 0, nobody answers). FLOWS -2: bare ACKs of 4 TCP flows (a download's
// ACK stream). FLOWS -3: one 4-tuple's SYN and FIN|ACK in turn (a client opening and closing it again and again).
// bench/packet-cost.ts builds and runs it.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <netinet/udp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
// Every datagram from a new source port (and, after 64512 of them, to the next destination address); tcp: every 4
// packets, a connection's SYN, ACK, FIN|ACK, ACK; tcp 2: bare ACKs of 4 flows; tcp 3: SYN, FIN|ACK of one 4-tuple.
static int new_flows(const struct sockaddr_in *to, long count, int tcp) {
  int fd = socket(AF_INET, SOCK_RAW, IPPROTO_RAW); // IP_HDRINCL: the kernel fills in the checksum, length and id
  if (fd < 0) { perror("socket"); return 1; }
  struct sockaddr_in src = { 0 };
  int probe = socket(AF_INET, SOCK_DGRAM, 0); // the source address the route gives
  socklen_t len = sizeof src;
  if (probe < 0 || connect(probe, (const struct sockaddr *)to, sizeof *to) < 0 ||
      getsockname(probe, (struct sockaddr *)&src, &len) < 0) { perror("source address"); return 1; }
  close(probe);
  static unsigned char pkts[64][sizeof(struct iphdr) + sizeof(struct udphdr) + 18];
  const size_t tcp_len = sizeof(struct iphdr) + sizeof(struct tcphdr);
  static const uint8_t tcp_flags[4] = { 0x02, 0x10, 0x11, 0x10 }; // SYN, ACK, FIN|ACK, ACK
  struct iovec iovs[64];
  struct mmsghdr msgs[64];
  struct sockaddr_in dsts[64];
  long sent = 0, errors = 0, n_pkt = 0;
  while (sent < count) {
    int n = count - sent < 64 ? (int)(count - sent) : 64;
    for (int i = 0; i < n; i++, n_pkt++) {
      long n_flow = tcp == 3 ? 0 : tcp == 2 ? n_pkt % 4 : tcp ? n_pkt / 4 : n_pkt;
      struct iphdr *ip = (struct iphdr *)pkts[i];
      memset(pkts[i], 0, sizeof pkts[i]);
      dsts[i] = *to;
      dsts[i].sin_addr.s_addr = htonl(ntohl(to->sin_addr.s_addr) + (uint32_t)(n_flow / 64512));
      ip->version = 4; ip->ihl = 5; ip->ttl = 64; ip->protocol = tcp ? IPPROTO_TCP : IPPROTO_UDP;
      ip->saddr = src.sin_addr.s_addr; ip->daddr = dsts[i].sin_addr.s_addr;
      if (tcp) {
        struct tcphdr *th = (struct tcphdr *)(ip + 1);
        int k = tcp == 3 ? (int)(n_pkt % 2) * 2 : tcp == 2 ? 1 : (int)(n_pkt % 4);
        th->source = htons((uint16_t)(1024 + n_flow % 64512)); th->dest = to->sin_port;
        th->seq = htonl(1000 + (k >= 1) + (k >= 3)); th->ack_seq = k >= 1 ? htonl(5000 + (k >= 3)) : 0;
        th->doff = 5; th->window = htons(65535);
        ((uint8_t *)th)[13] = tcp_flags[k];
        iovs[i].iov_len = tcp_len;
      } else {
        struct udphdr *udp = (struct udphdr *)(ip + 1);
        memcpy(udp + 1, "wccpd-fast-bench!", 18);
        udp->source = htons((uint16_t)(1024 + n_flow % 64512)); udp->dest = to->sin_port;
        udp->len = htons(sizeof(struct udphdr) + 18);
        iovs[i].iov_len = sizeof pkts[i];
      }
      iovs[i].iov_base = pkts[i];
      memset(&msgs[i], 0, sizeof msgs[i]);
      msgs[i].msg_hdr.msg_name = &dsts[i]; msgs[i].msg_hdr.msg_namelen = sizeof dsts[i];
      msgs[i].msg_hdr.msg_iov = &iovs[i]; msgs[i].msg_hdr.msg_iovlen = 1;
    }
    int r = sendmmsg(fd, msgs, n, 0);
    if (r < 0) { errors++; n_pkt -= n; if (errors > 1000000) break; continue; }
    sent += r; n_pkt -= n - r;
  }
  printf("%ld %ld\n", sent, errors);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 4) { fprintf(stderr, "usage: udpflood DST PORT COUNT [FLOWS]\n"); return 2; }
  long count = atol(argv[3]);
  int flows = argc > 4 ? atoi(argv[4]) : 1;
  struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[2])) };
  inet_pton(AF_INET, argv[1], &to.sin_addr);
  if (flows <= 0) return new_flows(&to, count, -flows);
  int fds[64];
  for (int f = 0; f < flows && f < 64; f++) {
    fds[f] = socket(AF_INET, SOCK_DGRAM, 0);
    if (fds[f] < 0) { perror("socket"); return 1; }
  }
  char payload[18] = "wccpd-fast-bench!";
  struct iovec iov = { payload, sizeof payload };
  struct mmsghdr msgs[64];
  for (int i = 0; i < 64; i++) {
    memset(&msgs[i], 0, sizeof msgs[i]);
    msgs[i].msg_hdr.msg_name = &to; msgs[i].msg_hdr.msg_namelen = sizeof to;
    msgs[i].msg_hdr.msg_iov = &iov; msgs[i].msg_hdr.msg_iovlen = 1;
  }
  long sent = 0, errors = 0; int f = 0;
  while (sent < count) {
    int n = count - sent < 64 ? (int)(count - sent) : 64;
    int r = sendmmsg(fds[f], msgs, n, 0);
    if (r < 0) { errors++; if (errors > 1000000) break; continue; }
    sent += r; f = (f + 1) % flows;
  }
  printf("%ld %ld\n", sent, errors);
  return 0;
}
