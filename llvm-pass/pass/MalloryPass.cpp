// Mallory's instrumentation pass (new pass manager plugin).
//
// Inserts `__mallory_event(id, kind)` at the entry of annotated functions (FUNC = 1) and at
// the first instruction of annotated statements (BLOCK = 2), locating them through debug-info
// line numbers. Targets come from the annotation scanner via the file named by
// MALLORY_TARGETS (written by the mallory-cc wrapper); with MALLORY_AUTO=1 the pass also picks
// points itself (error paths, switches over enums, functions matching MALLORY_AUTO_FUNCS).
//
// It runs at pipeline start, before any inlining, so an annotated function inlined elsewhere
// carries its hook along. Every instrumented point is described by one JSON line placed in
// the `mallory_catalog` section; the linker concatenates them and the wrapper turns them into
// the catalogue next to the binary.
//
// Ids: FNV-1a 64 over "relpath:line:KIND" (mallory/observer/event_ids.py is the Python twin).

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/BinaryFormat/Dwarf.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Demangle/Demangle.h"
#include "llvm/IR/DebugInfo.h"
#include "llvm/IR/DebugInfoMetadata.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/InstIterator.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/IntrinsicInst.h"
#include "llvm/IR/Module.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Transforms/Utils/ModuleUtils.h"
#if __has_include("llvm/Plugins/PassPlugin.h")
#include "llvm/Plugins/PassPlugin.h" // LLVM >= 22
#else
#include "llvm/Passes/PassPlugin.h"
#endif

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

using namespace llvm;

namespace {

constexpr uint32_t KindFunc = 1;
constexpr uint32_t KindBlock = 2;

uint64_t fnv1a64(StringRef Bytes) {
  uint64_t H = 0xcbf29ce484222325ULL;
  for (unsigned char C : Bytes) {
    H ^= C;
    H *= 0x100000001b3ULL;
  }
  return H;
}

const char *kindName(uint32_t Kind) { return Kind == KindFunc ? "FUNC" : "BLOCK"; }

uint64_t eventId(StringRef RelPath, unsigned Line, uint32_t Kind) {
  std::string Key = (RelPath + ":" + Twine(Line) + ":" + kindName(Kind)).str();
  return fnv1a64(Key);
}

std::string jsonString(StringRef S) {
  std::string Out = "\"";
  for (unsigned char C : S) {
    switch (C) {
    case '"': Out += "\\\""; break;
    case '\\': Out += "\\\\"; break;
    case '\n': Out += "\\n"; break;
    case '\t': Out += "\\t"; break;
    default:
      if (C < 0x20) {
        char Buf[8];
        snprintf(Buf, sizeof Buf, "\\u%04x", C);
        Out += Buf;
      } else {
        Out += static_cast<char>(C);
      }
    }
  }
  return Out + "\"";
}

std::string getEnv(const char *Name) {
  const char *V = std::getenv(Name);
  return V ? std::string(V) : std::string();
}

// One annotation the scanner placed: the code it points at spans lines [First, Last].
struct Target {
  uint32_t Kind;
  unsigned First, Last;
  std::string AbsPath, RelPath, Label;
  bool Placed = false;
};

struct Point {
  uint64_t Id;
  uint32_t Kind;
  std::string RelPath, Function, Label;
  unsigned Line;
};

class Instrumenter {
public:
  explicit Instrumenter(Module &M) : M(M), Ctx(M.getContext()) {
    BuildRoot = getEnv("MALLORY_BUILD_ROOT");
    if (!BuildRoot.empty())
      BuildRoot = realPath(BuildRoot);
  }

  bool run() {
    bool Changed = false;
    std::string TargetsFile = getEnv("MALLORY_TARGETS");
    if (!TargetsFile.empty() && loadTargets(TargetsFile))
      Changed |= placeAnnotations();
    if (getEnv("MALLORY_AUTO") == "1")
      Changed |= placeAuto();
    emitCatalogue();
    warnUnplaced();
    return Changed;
  }

private:
  Module &M;
  LLVMContext &Ctx;
  std::string BuildRoot;
  std::vector<Target> Targets;
  std::vector<Point> Points;
  std::map<std::pair<const BasicBlock *, uint64_t>, bool> Hooked; // no double hook per block+id
  StringMap<std::string> RealPaths;

  std::string realPath(StringRef P) {
    auto It = RealPaths.find(P);
    if (It != RealPaths.end())
      return It->second;
    SmallString<256> Out;
    std::string Result;
    if (sys::fs::real_path(P, Out))
      Result = P.str();
    else
      Result = std::string(Out.str());
    RealPaths[P] = Result;
    return Result;
  }

  std::string absFile(const DIFile *F) {
    if (!F)
      return "";
    SmallString<256> P(F->getFilename());
    if (!sys::path::is_absolute(P)) {
      SmallString<256> Dir(F->getDirectory());
      sys::path::append(Dir, P);
      P = Dir;
    }
    return realPath(P);
  }

  // Same rule as event_ids.relative_path: strip "<root>/" when the file is under the root.
  std::string relPath(StringRef Abs) {
    std::string Prefix = BuildRoot + "/";
    if (!BuildRoot.empty() && Abs.substr(0, Prefix.size()) == Prefix)
      return Abs.drop_front(Prefix.size()).str();
    return Abs.str();
  }

  bool loadTargets(StringRef Path) {
    auto Buf = MemoryBuffer::getFile(Path);
    if (!Buf) {
      errs() << "mallory-pass: warning: cannot read targets file " << Path << "\n";
      return false;
    }
    SmallVector<StringRef, 0> Lines;
    (*Buf)->getBuffer().split(Lines, '\n', -1, false);
    for (StringRef L : Lines) {
      SmallVector<StringRef, 6> F;
      L.split(F, '\t', 5);
      if (F.size() != 6)
        continue;
      Target T;
      T.Kind = F[0] == "FUNC" ? KindFunc : KindBlock;
      if (F[1].getAsInteger(10, T.First) || F[2].getAsInteger(10, T.Last))
        continue;
      T.AbsPath = F[3].str();
      T.RelPath = F[4].str();
      T.Label = F[5].str();
      Targets.push_back(std::move(T));
    }
    return !Targets.empty();
  }

  static std::string functionName(const Function &F) {
    return demangle(std::string(F.getName()));
  }

  FunctionCallee hook() {
    Type *I64 = Type::getInt64Ty(Ctx), *I32 = Type::getInt32Ty(Ctx);
    FunctionCallee C = M.getOrInsertFunction(
        "__mallory_event", FunctionType::get(Type::getVoidTy(Ctx), {I64, I32}, false));
    if (auto *Fn = dyn_cast<Function>(C.getCallee()))
      Fn->addFnAttr(Attribute::NoUnwind);
    return C;
  }

  // Insert the hook before `Before` (or at the block's first insertion point).
  bool insertHook(BasicBlock &BB, Instruction *Before, const Point &P, DebugLoc Loc) {
    auto Key = std::make_pair(&BB, P.Id);
    if (Hooked.count(Key))
      return false;
    Hooked[Key] = true;
    if (!Before || isa<PHINode>(Before) || Before->isEHPad())
      Before = &*BB.getFirstInsertionPt();
    IRBuilder<> B(Before);
    CallInst *Call = B.CreateCall(hook(), {B.getInt64(P.Id), B.getInt32(P.Kind)});
    Call->setDoesNotThrow();
    if (Loc)
      Call->setDebugLoc(Loc);
    Points.push_back(P);
    return true;
  }

  bool placeAnnotations() {
    bool Changed = false;
    for (Function &F : M) {
      if (F.isDeclaration())
        continue;
      DISubprogram *SP = F.getSubprogram();
      if (!SP)
        continue;
      std::string SPFile = absFile(SP->getFile());
      for (Target &T : Targets) {
        if (T.Kind == KindFunc) {
          if (SPFile != T.AbsPath || SP->getLine() < T.First || SP->getLine() > T.Last)
            continue;
          Point P{eventId(T.RelPath, T.First, KindFunc), KindFunc, T.RelPath, functionName(F),
                  T.Label, T.First};
          BasicBlock &Entry = F.getEntryBlock();
          Changed |= insertHook(Entry, &*Entry.getFirstInsertionPt(), P,
                                DILocation::get(Ctx, SP->getLine(), 0, SP));
          T.Placed = true;
        } else {
          Changed |= placeBlock(F, T);
        }
      }
    }
    return Changed;
  }

  // The statement's first instruction in layout order, among those on the lowest line of
  // [First, Last] that has code (Last > First when the annotated line is only a label).
  bool placeBlock(Function &F, Target &T) {
    Instruction *Best = nullptr;
    unsigned BestLine = ~0u;
    for (Instruction &I : instructions(F)) {
      if (isa<DbgInfoIntrinsic>(I) || isa<AllocaInst>(I))
        continue;
      const DebugLoc &DL = I.getDebugLoc();
      if (!DL || DL.getLine() < T.First || DL.getLine() > T.Last || DL.getLine() >= BestLine)
        continue;
      auto *Scope = dyn_cast<DIScope>(DL.getScope());
      if (!Scope || absFile(Scope->getFile()) != T.AbsPath)
        continue;
      Best = &I;
      BestLine = DL.getLine();
    }
    if (!Best)
      return false;
    T.Placed = true;
    Point P{eventId(T.RelPath, T.First, KindBlock), KindBlock, T.RelPath, functionName(F),
            T.Label, T.First};
    return insertHook(*Best->getParent(), Best, P, Best->getDebugLoc());
  }

  // ---- --auto: points chosen without annotations -------------------------------------

  static unsigned firstLine(const BasicBlock &BB) {
    for (const Instruction &I : BB)
      if (!isa<DbgInfoIntrinsic>(I) && I.getDebugLoc() && I.getDebugLoc().getLine())
        return I.getDebugLoc().getLine();
    return 0;
  }

  std::string fileOf(const Function &F) {
    DISubprogram *SP = F.getSubprogram();
    return SP ? absFile(SP->getFile()) : "";
  }

  bool autoBlock(BasicBlock &BB, unsigned Line, const std::string &Label) {
    Function &F = *BB.getParent();
    std::string Abs = fileOf(F);
    if (Abs.empty() || Line == 0)
      return false;
    std::string Rel = relPath(Abs);
    Point P{eventId(Rel, Line, KindBlock), KindBlock, Rel, functionName(F), Label, Line};
    DebugLoc Loc;
    for (Instruction &I : BB)
      if (I.getDebugLoc()) {
        Loc = I.getDebugLoc();
        break;
      }
    return insertHook(BB, &*BB.getFirstInsertionPt(), P, Loc);
  }

  static const DICompositeType *enumType(const DIType *T) {
    while (auto *D = dyn_cast_or_null<DIDerivedType>(T))
      T = D->getBaseType();
    auto *C = dyn_cast_or_null<DICompositeType>(T);
    return C && C->getTag() == dwarf::DW_TAG_enumeration_type ? C : nullptr;
  }

  // The enum type of a switch condition loaded from a local variable or parameter.
  static const DICompositeType *switchEnum(SwitchInst &SI) {
    Value *V = SI.getCondition();
    while (auto *Cast = dyn_cast<CastInst>(V))
      V = Cast->getOperand(0);
    auto *Load = dyn_cast<LoadInst>(V);
    if (!Load)
      return nullptr;
    Value *Ptr = Load->getPointerOperand()->stripPointerCasts();
#if LLVM_VERSION_MAJOR >= 19
    for (auto *DVR : findDVRDeclares(Ptr))
      if (auto *E = enumType(DVR->getVariable()->getType()))
        return E;
#else
    for (auto *DDI : FindDbgDeclareUses(Ptr))
      if (auto *E = enumType(DDI->getVariable()->getType()))
        return E;
#endif
    return nullptr;
  }

  bool placeAuto() {
    bool Changed = false;
    std::string ErrPattern = getEnv("MALLORY_AUTO_ERROR_FUNCS");
    if (ErrPattern.empty())
      ErrPattern = "^(abort|exit|_exit|_Exit|__assert_fail|__assert_perror_fail|err|errx|verr|"
                   "verrx|perror)$|([Ee]rror|[Ff]atal|[Pp]anic)";
    Regex ErrorFuncs(ErrPattern);
    std::string FuncPattern = getEnv("MALLORY_AUTO_FUNCS");
    Regex UserFuncs(FuncPattern);
    for (Function &F : M) {
      if (F.isDeclaration() || !F.getSubprogram())
        continue;
      if (!FuncPattern.empty() && UserFuncs.match(functionName(F))) {
        std::string Rel = relPath(fileOf(F));
        unsigned Line = F.getSubprogram()->getLine();
        Point P{eventId(Rel, Line, KindFunc), KindFunc, Rel, functionName(F), "auto:func", Line};
        BasicBlock &Entry = F.getEntryBlock();
        Changed |= insertHook(Entry, &*Entry.getFirstInsertionPt(), P,
                              DILocation::get(Ctx, Line, 0, F.getSubprogram()));
      }
      std::vector<std::pair<BasicBlock *, std::string>> Picks;
      for (BasicBlock &BB : F) {
        for (Instruction &I : BB) {
          auto *Call = dyn_cast<CallBase>(&I);
          Function *Callee = Call ? Call->getCalledFunction() : nullptr;
          if (Callee && !Callee->isIntrinsic() && ErrorFuncs.match(Callee->getName())) {
            Picks.push_back({&BB, "auto:error-path:" + Callee->getName().str()});
            break;
          }
        }
        auto *SI = dyn_cast<SwitchInst>(BB.getTerminator());
        const DICompositeType *Enum = SI ? switchEnum(*SI) : nullptr;
        if (!Enum)
          continue;
        for (auto &Case : SI->cases()) {
          int64_t Value = Case.getCaseValue()->getSExtValue();
          std::string Name = std::to_string(Value);
          for (const DINode *E : Enum->getElements())
            if (auto *En = dyn_cast<DIEnumerator>(E))
              if (En->getValue().getSExtValue() == Value) {
                Name = En->getName().str();
                break;
              }
          Picks.push_back({Case.getCaseSuccessor(), "auto:enum-case:" + Enum->getName().str() +
                                                        "::" + Name});
        }
      }
      for (auto &Pick : Picks)
        Changed |= autoBlock(*Pick.first, firstLine(*Pick.first), Pick.second);
    }
    return Changed;
  }

  // ---- catalogue and warnings --------------------------------------------------------

  void emitCatalogue() {
    if (Points.empty())
      return;
    std::vector<GlobalValue *> Used;
    unsigned N = 0;
    for (const Point &P : Points) {
      std::string Line = "{\"id\":\"" + std::to_string(P.Id) + "\",\"file\":" +
                         jsonString(P.RelPath) + ",\"line\":" + std::to_string(P.Line) +
                         ",\"function\":" + jsonString(P.Function) + ",\"kind\":\"" +
                         kindName(P.Kind) + "\",\"label\":" + jsonString(P.Label) + "}\n";
      Constant *Init = ConstantDataArray::getString(Ctx, Line, /*AddNull=*/false);
      auto *GV = new GlobalVariable(M, Init->getType(), true, GlobalValue::PrivateLinkage, Init,
                                    "__mallory_catalog_" + Twine(N++));
      GV->setSection("mallory_catalog");
      GV->setAlignment(Align(1));
      Used.push_back(GV);
    }
    appendToUsed(M, Used);
  }

  void warnUnplaced() {
    std::string Main = realPath(M.getSourceFileName());
    for (const Target &T : Targets)
      if (!T.Placed && T.AbsPath == Main)
        errs() << "mallory-pass: warning: " << T.RelPath << ":" << T.First << ": INSTRUMENT_"
               << kindName(T.Kind) << " not placed: no "
               << (T.Kind == KindFunc ? "function definition" : "code") << " starts there\n";
  }
};

struct MalloryPass : PassInfoMixin<MalloryPass> {
  PreservedAnalyses run(Module &M, ModuleAnalysisManager &) {
    return Instrumenter(M).run() ? PreservedAnalyses::none() : PreservedAnalyses::all();
  }
  static bool isRequired() { return true; }
};

} // namespace

extern "C" LLVM_ATTRIBUTE_WEAK PassPluginLibraryInfo llvmGetPassPluginInfo() {
  return {LLVM_PLUGIN_API_VERSION, "MalloryPass", "1", [](PassBuilder &PB) {
            PB.registerPipelineStartEPCallback(
                [](ModulePassManager &MPM, OptimizationLevel) { MPM.addPass(MalloryPass()); });
            PB.registerPipelineParsingCallback(
                [](StringRef Name, ModulePassManager &MPM, ArrayRef<PassBuilder::PipelineElement>) {
                  if (Name != "mallory")
                    return false;
                  MPM.addPass(MalloryPass());
                  return true;
                });
          }};
}
