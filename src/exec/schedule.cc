#include "exec/schedule.h"

#include <algorithm>
#include <string>
#include <vector>

namespace braid::exec {

const char* primName(Prim p) {
  switch (p) {
    case Prim::kSend: return "send";
    case Prim::kRecv: return "recv";
    case Prim::kRecvReduce: return "recvReduce";
    case Prim::kRecvReduceSend: return "recvReduceSend";
    case Prim::kRecvReduceCopySend: return "recvReduceCopySend";
    case Prim::kRecvCopySend: return "recvCopySend";
    case Prim::kCopy: return "copy";
    case Prim::kLocalReduce: return "localReduce";
  }
  return "?";
}

size_t Step::bytes() const {
  switch (prim) {
    case Prim::kSend:
    case Prim::kRecvReduceSend:
      return src.bytes;
    default:
      return dst.bytes;
  }
}

namespace {
bool usesSrc(Prim p) { return p != Prim::kRecv && p != Prim::kRecvCopySend; }
bool usesDst(Prim p) { return p != Prim::kSend && p != Prim::kRecvReduceSend; }
bool usesIn(Prim p) { return p != Prim::kSend && p != Prim::kCopy && p != Prim::kLocalReduce; }
bool usesOut(Prim p) {
  return p == Prim::kSend || p == Prim::kRecvReduceSend || p == Prim::kRecvReduceCopySend ||
         p == Prim::kRecvCopySend;
}
}  // namespace

size_t stepsAhead(const ChannelPlan& plan, size_t rounds, size_t sliceBytes, size_t elemBytes, int fifoSlots) {
  const size_t count = plan.steps.size();
  if (!plan.overlapRounds || !plan.phases.empty() || rounds < 2 || count < 2 || fifoSlots <= 0 || sliceBytes == 0 ||
      elemBytes == 0)
    return 0;
  const Step& last = plan.steps[count - 1];
  if (!usesIn(last.prim) || usesOut(last.prim)) return 0;
  // The most slices any round of `st` takes.
  auto slices = [&](const Step& st) {
    const size_t elems = st.bytes() / elemBytes;
    const size_t most = (elems + rounds - 1) / rounds * elemBytes;
    return (most + sliceBytes - 1) / sliceBytes;
  };
  size_t lead = 0;
  const Step* sender = nullptr;
  for (; lead < count - 1 && !usesIn(plan.steps[lead].prim); ++lead) {
    if (!usesOut(plan.steps[lead].prim)) continue;
    if (sender) return 0;
    sender = &plan.steps[lead];
  }
  if (lead == 0) return 0;
  if (sender) {
    const Step& before = plan.steps[count - 2];
    size_t n = slices(*sender);
    if (usesOut(before.prim) && before.peerOut == sender->peerOut) n += slices(before);
    if (n > static_cast<size_t>(fifoSlots)) return 0;
  }
  return lead;
}

std::string validate(const Schedule& s, int nranks, size_t inputBytes, size_t outputBytes,
                     const std::vector<size_t>& extraBytes) {
  size_t es = dataTypeSize(s.dtype);
  auto limit = [&](Buf b) -> size_t {
    if (b == Buf::kInput) return inputBytes;
    if (b == Buf::kOutput) return outputBytes;
    if (b == Buf::kScratch) return s.scratchBytes;
    size_t i = static_cast<size_t>(b) - static_cast<size_t>(Buf::kExtra0);
    return i < extraBytes.size() ? extraBytes[i] : 0;
  };
  if (s.connectionSet == 1 && s.channels.size() > 1) return "a mesh schedule must have one channel";
  for (size_t c = 0; c < s.channels.size(); ++c) {
    const ChannelPlan& ch = s.channels[c];
    if (ch.rounds < 1) return "channel " + std::to_string(c) + ": rounds < 1";
    size_t next = 0;
    for (const Phase& ph : ch.phases) {
      if (ph.firstStep != next || ph.rounds < 1) return "channel " + std::to_string(c) + ": phases out of order";
      next += ph.numSteps;
    }
    if (!ch.phases.empty() && next != ch.steps.size())
      return "channel " + std::to_string(c) + ": phases do not cover the steps";
    for (size_t i = 0; i < ch.steps.size(); ++i) {
      const Step& st = ch.steps[i];
      std::string where = "channel " + std::to_string(c) + " step " + std::to_string(i) + " (" +
                          primName(st.prim) + "): ";
      auto checkRegion = [&](const Region& r, const char* what) -> std::string {
        if (r.offset % es || r.bytes % es) return where + what + " not element-aligned";
        if (r.offset + r.bytes > limit(r.buf)) return where + what + " outside its buffer";
        return "";
      };
      if (usesSrc(st.prim)) {
        std::string e = checkRegion(st.src, "src");
        if (!e.empty()) return e;
      }
      if (usesDst(st.prim)) {
        std::string e = checkRegion(st.dst, "dst");
        if (!e.empty()) return e;
      }
      if (usesSrc(st.prim) && usesDst(st.prim) && st.src.bytes != st.dst.bytes)
        return where + "src and dst sizes differ";
      if (usesIn(st.prim) && (st.peerIn < 0 || st.peerIn >= nranks)) return where + "peerIn out of range";
      if (usesOut(st.prim) && (st.peerOut < 0 || st.peerOut >= nranks)) return where + "peerOut out of range";
    }
  }
  for (const std::vector<int>* acks : {&s.ackTo, &s.ackFrom})
    for (int p : *acks)
      if (p < 0 || p >= nranks) return "acknowledgement peer " + std::to_string(p) + " out of range";
  return "";
}

void computeAcks(Schedule* s, int nranks) {
  std::vector<char> sends(static_cast<size_t>(nranks), 0), recvs(static_cast<size_t>(nranks), 0);
  for (const ChannelPlan& ch : s->channels) {
    for (const Step& st : ch.steps) {
      if (st.bytes() == 0) continue;  // cut into no slices: nothing travels
      if (usesIn(st.prim) && st.peerIn >= 0 && st.peerIn < nranks) recvs[static_cast<size_t>(st.peerIn)] = 1;
      if (usesOut(st.prim) && st.peerOut >= 0 && st.peerOut < nranks) sends[static_cast<size_t>(st.peerOut)] = 1;
    }
  }
  s->ackTo.clear();
  s->ackFrom.clear();
  for (int p = 0; p < nranks; ++p) {
    if (recvs[static_cast<size_t>(p)] && !sends[static_cast<size_t>(p)]) s->ackTo.push_back(p);
    if (sends[static_cast<size_t>(p)] && !recvs[static_cast<size_t>(p)]) s->ackFrom.push_back(p);
  }
}

}  // namespace braid::exec
