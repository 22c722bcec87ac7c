// OpenCV 4.5.1's cv::findHomography with USAC_MAGSAC on one real image pair, outside descl:
// the reproducer of the crash of issue 57 (Debian 11's OpenCV, scripts/bullseye). SIFT on both
// images, mutual nearest neighbours (descl's --no-ratio), then the call descl's
// geometry::verify makes: findHomography(a, b, METHOD, THRESHOLD, mask, max_iters, confidence).
//
//   g++ -O1 -g scripts/usac-homography-repro.cpp $(pkg-config --cflags --libs opencv4) -o repro
//   ./repro IMG_A IMG_B [METHOD [THRESHOLD [MAX_ITERS [CONFIDENCE [KEEP]]]]]
//     METHOD: 38 USAC_MAGSAC (default), 32 USAC_DEFAULT, 36 USAC_ACCURATE, 8 RANSAC, or
//     1SL: cv::UsacParams with ScoreMethod S (2 MAGSAC) and LocalOptimMethod L (4 SIGMA);
//     -METHOD: the same for the fundamental matrix (findFundamentalMat);
//     THRESHOLD 3 px, MAX_ITERS 10000, CONFIDENCE 0.9999; KEEP: only the first KEEP matches
#include <opencv2/calib3d.hpp>
#include <opencv2/features2d.hpp>
#include <opencv2/imgcodecs.hpp>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char **argv) {
  if (argc < 3) { std::fprintf(stderr, "usage: %s IMG_A IMG_B [METHOD [THRESHOLD [MAX_ITERS [CONFIDENCE [KEEP]]]]]\n", argv[0]); return 2; }
  const int method = argc > 3 ? std::atoi(argv[3]) : cv::USAC_MAGSAC;
  const double threshold = argc > 4 ? std::atof(argv[4]) : 3.0;
  const int max_iters = argc > 5 ? std::atoi(argv[5]) : 10000;
  const double confidence = argc > 6 ? std::atof(argv[6]) : 0.9999;
  const size_t keep = argc > 7 ? std::strtoul(argv[7], nullptr, 10) : 0;  // first KEEP matches, 0: all
  cv::Mat a = cv::imread(argv[1], cv::IMREAD_GRAYSCALE), b = cv::imread(argv[2], cv::IMREAD_GRAYSCALE);
  if (a.empty() || b.empty()) { std::fprintf(stderr, "cannot read the images\n"); return 2; }
  auto sift = cv::SIFT::create();
  std::vector<cv::KeyPoint> ka, kb;
  cv::Mat da, db;
  sift->detectAndCompute(a, cv::noArray(), ka, da);
  sift->detectAndCompute(b, cv::noArray(), kb, db);
  cv::BFMatcher bf(cv::NORM_L2, /*crossCheck=*/true);
  std::vector<cv::DMatch> m;
  bf.match(da, db, m);
  std::vector<cv::Point2f> pa, pb;
  if (keep > 0 && keep < m.size()) m.resize(keep);
  for (const auto &d : m) { pa.push_back(ka[d.queryIdx].pt); pb.push_back(kb[d.trainIdx].pt); }
  std::printf("OpenCV %s: %zu / %zu keypoints, %zu mutual matches; findHomography(method %d, %.1f px, %d iterations, confidence %g)\n",
              CV_VERSION, ka.size(), kb.size(), m.size(), method, threshold, max_iters, confidence);
  std::fflush(stdout);
  cv::Mat mask;
  cv::Mat h;
  const bool fundamental = method < 0;  // -METHOD: the fundamental matrix instead
  const int m_abs = fundamental ? -method : method;
  if (m_abs >= 100) {  // 1SL: UsacParams with ScoreMethod S and LocalOptimMethod L
    cv::UsacParams p;
    p.score = static_cast<cv::ScoreMethod>((m_abs / 10) % 10);
    p.loMethod = static_cast<cv::LocalOptimMethod>(m_abs % 10);
    p.threshold = threshold;
    p.maxIterations = max_iters;
    p.confidence = confidence;
    h = fundamental ? cv::findFundamentalMat(pa, pb, mask, p) : cv::findHomography(pa, pb, mask, p);
  } else if (fundamental) {
    h = cv::findFundamentalMat(pa, pb, m_abs, threshold, confidence, max_iters, mask);
  } else {
    h = cv::findHomography(pa, pb, m_abs, threshold, mask, max_iters, confidence);
  }
  std::printf("H %s, %d inliers\n", h.empty() ? "none" : "found", mask.empty() ? 0 : cv::countNonZero(mask));
  return 0;
}
