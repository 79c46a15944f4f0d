// SPDX-License-Identifier: MIT
/*
 * spoof_echo: sends ICMP echo requests as whole Ethernet frames from a source MAC of
 * one's choosing (an AF_PACKET raw socket), and counts the echo replies that come back.
 * Built static on the host and copied into a kernel-driver guest (boot.sh --file) by
 * tests/tests/vm_kernel.rs, to show a VF's spoof check from inside a guest.
 *
 * Usage: spoof_echo IFACE SRC_MAC DST_MAC SRC_IP DST_IP COUNT
 * Prints `spoof_echo: sent N replies M` and exits 0 when every request was sent.
 */
#include <arpa/inet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/ip.h>
#include <netinet/ip_icmp.h>
#include <netpacket/packet.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void parse_mac(const char *s, uint8_t mac[6])
{
	unsigned int b[6];

	if (sscanf(s, "%x:%x:%x:%x:%x:%x", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5]) != 6) {
		fprintf(stderr, "spoof_echo: %s is not a MAC\n", s);
		exit(2);
	}
	for (int i = 0; i < 6; i++)
		mac[i] = (uint8_t)b[i];
}

static uint16_t checksum(const void *data, size_t len)
{
	const uint8_t *p = data;
	uint32_t sum = 0;

	for (size_t i = 0; i + 1 < len; i += 2)
		sum += (uint32_t)(p[i] << 8 | p[i + 1]);
	if (len & 1)
		sum += (uint32_t)(p[len - 1] << 8);
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return htons((uint16_t)~sum);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc != 7) {
		fprintf(stderr, "usage: spoof_echo IFACE SRC_MAC DST_MAC SRC_IP DST_IP COUNT\n");
		return 2;
	}
	uint8_t src_mac[6], dst_mac[6];
	struct in_addr src, dst;
	int count = atoi(argv[6]);
	unsigned int ifindex = if_nametoindex(argv[1]);

	parse_mac(argv[2], src_mac);
	parse_mac(argv[3], dst_mac);
	if (!ifindex || inet_pton(AF_INET, argv[4], &src) != 1 ||
	    inet_pton(AF_INET, argv[5], &dst) != 1 || count < 1) {
		fprintf(stderr, "spoof_echo: bad interface, address or count\n");
		return 2;
	}
	int tx = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_IP));
	int rx = socket(AF_PACKET, SOCK_DGRAM, htons(ETH_P_IP));

	if (tx < 0 || rx < 0) {
		perror("spoof_echo: socket");
		return 1;
	}
	struct sockaddr_ll ll = {
		.sll_family = AF_PACKET,
		.sll_protocol = htons(ETH_P_IP),
		.sll_ifindex = (int)ifindex,
		.sll_halen = 6,
	};
	memcpy(ll.sll_addr, dst_mac, 6);
	if (bind(rx, (struct sockaddr *)&ll, sizeof(ll)) < 0) {
		perror("spoof_echo: bind");
		return 1;
	}
	uint16_t id = (uint16_t)getpid();
	int sent = 0, replies = 0;
	double deadline = 0;

	for (int seq = 0; seq < count; seq++) {
		uint8_t frame[14 + 20 + 8 + 32] = { 0 };
		struct iphdr *ip = (struct iphdr *)(frame + 14);
		struct icmphdr *icmp = (struct icmphdr *)(frame + 34);

		memcpy(frame, dst_mac, 6);
		memcpy(frame + 6, src_mac, 6);
		frame[12] = 0x08;
		ip->version = 4;
		ip->ihl = 5;
		ip->tot_len = htons(sizeof(frame) - 14);
		ip->id = htons((uint16_t)seq);
		ip->ttl = 64;
		ip->protocol = IPPROTO_ICMP;
		ip->saddr = src.s_addr;
		ip->daddr = dst.s_addr;
		ip->check = checksum(ip, 20);
		icmp->type = ICMP_ECHO;
		icmp->un.echo.id = htons(id);
		icmp->un.echo.sequence = htons((uint16_t)seq);
		memset(frame + 42, 0x5a, 32);
		icmp->checksum = checksum(icmp, 8 + 32);
		if (sendto(tx, frame, sizeof(frame), 0, (struct sockaddr *)&ll, sizeof(ll)) ==
		    (ssize_t)sizeof(frame))
			sent++;
		else
			perror("spoof_echo: sendto");
		/* 0.1 s between requests; replies are read meanwhile, and for 2 s after. */
		deadline = now() + (seq + 1 == count ? 2.0 : 0.1);
		for (;;) {
			double left = deadline - now();
			struct pollfd pfd = { .fd = rx, .events = POLLIN };
			uint8_t buf[2048];

			if (left <= 0 || poll(&pfd, 1, (int)(left * 1000) + 1) <= 0)
				break;
			ssize_t n = recv(rx, buf, sizeof(buf), 0);
			const struct iphdr *rip = (const struct iphdr *)buf;

			if (n < 28 || rip->protocol != IPPROTO_ICMP || rip->saddr != dst.s_addr)
				continue;
			const struct icmphdr *ric = (const struct icmphdr *)(buf + rip->ihl * 4);

			if ((ssize_t)(rip->ihl * 4 + 8) <= n && ric->type == ICMP_ECHOREPLY &&
			    ntohs(ric->un.echo.id) == id)
				replies++;
		}
	}
	printf("spoof_echo: sent %d replies %d\n", sent, replies);
	return sent == count ? 0 : 1;
}
